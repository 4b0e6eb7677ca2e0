"""A fake `ray` for the slime job script (engines.slime.job_script) on a CPU, and the Table-1 preset
pointed at local files: ``table1_config``, ``fake_job_environment``, ``fake_eval_server``, ``fake_slime_job``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from engines.slime.params import REPO
from grid.config import load
from grid.expand import resolve_run_config
from grid.folder import GridDir
from tests.support.fake_sglang import fake_apptainer
from tests.support.paths import FIXTURES, ROOT, SUPPORT
from tests.support.ports import free_ports

PRESET = ROOT / "workflow" / "presets" / "table1.yaml"
DAPO_PROMPTS = FIXTURES / "dapo_prompts.jsonl"
PIN = yaml.safe_load((Path(REPO) / "envs" / "slime-container.yaml").read_text())
IMAGE = PIN["image"].replace("localhost:5000", "registry.example.org")  # the pinned image, pushed where nodes reach


def table1_config(tmp_path: Path) -> dict:
    """The Table-1 preset with its model and data paths pointing at existing local files."""
    config = load(PRESET)
    data = tmp_path / "data"
    for name in ("Qwen3-30B-A3B-Base", "Qwen3-30B-A3B-Base_torch_dist"):
        (data / name).mkdir(parents=True)
    (data / "prompts.jsonl").write_text(DAPO_PROMPTS.read_text())  # DAPO-Math-17k format, as the preset's
    config["results_dir"] = str(tmp_path / "results")
    config["engine_params"].update(hf_checkpoint=str(data / "Qwen3-30B-A3B-Base"),
                                   ref_load=str(data / "Qwen3-30B-A3B-Base_torch_dist"),
                                   prompt_data=str(data / "prompts.jsonl"), container=IMAGE)
    return config


FAKE_RAY = r'''#!{python}
"""A fake `ray`: records its calls; `job submit` plays a slime job writing what slime + the hooks write,
in slime's order: the Megatron save, then the HF save (config.json, shards, the index last); a job
killed after FAKE_RAY_FAIL_AFTER steps dies in the middle of its last HF save. SLURM's warning reaches
the job script after FAKE_RAY_WARN_AFTER steps, or with FAKE_RAY_WARN_AT_START during `ray start`,
before the job is submitted (bash marks it once `ray start` returns); a warning the script has not
marked within 10 s fails the job; the custom config's stop time (stalebench_stop_at) stops it as the
driver's clock does. FAKE_RAY_NAN_AT: slime logs a non-finite grad norm at that step
and the job ends there, as the driver ends it (with --fp16 it goes on: a loss-scale overflow). A canary job (the custom config's stalebench_canary) runs
the driver's canary over a fake slime, tests/support/canary_job.py (FAKE_RAY_FAIL_AFTER=0: it dies first)."""
import json, os, signal, sys, time
sys.path.insert(0, {tests!r})
import yaml
from tests.support.slime_checkpoints import write_hf_save, write_megatron_save
calls = os.environ["FAKE_RAY_CALLS"]
with open(calls, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
def wait_for_the_mark(train):
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(train, "stop_requested")):
        if time.monotonic() > deadline:
            sys.exit("fake ray: the job script did not mark SIGURG within 10 s (no trap installed?)")
        time.sleep(0.01)
if sys.argv[1:2] == ["start"] and os.environ.get("FAKE_RAY_WARN_AT_START"):
    os.kill(os.getppid(), signal.SIGURG)  # as srun would send it
if sys.argv[1:3] == ["job", "submit"]:
    args = sys.argv[sys.argv.index("--") + 1:]
    def value(flag):
        return args[args.index(flag) + 1]
    steps, every = int(value("--num-rollout")), int(value("--save-interval"))
    train = os.path.dirname(value("--custom-config-path"))
    fail_after = int(os.environ.get("FAKE_RAY_FAIL_AFTER", steps))
    warn_after = int(os.environ.get("FAKE_RAY_WARN_AFTER", steps))
    nan_at = int(os.environ.get("FAKE_RAY_NAN_AT", 0))
    with open(value("--custom-config-path")) as f:
        custom = yaml.safe_load(f)
    if custom["stalebench_canary"] and fail_after:  # the harness's driver over a fake slime: tests/support/canary_job.py
        from tests.support.canary_job import run as canary_job
        sys.exit(canary_job(value, custom))
    with open(os.path.join(train, "metrics.jsonl"), "a") as f:
        for rollout_id in range(min(steps, fail_after)):
            grad_norm = float("nan") if rollout_id + 1 == nan_at else 1.0  # slime logs a skipped step's norm
            f.write(json.dumps({{"step": rollout_id + 1, "loss": -0.1, "grad_norm": grad_norm}}) + "\n")
            if rollout_id + 1 == nan_at and "--fp16" not in args:  # the driver: no save, a normal end
                break  # (fp16: a loss-scale overflow, a skipped step the run goes on from)
            if rollout_id == 0 and os.environ.get("FAKE_RAY_WARN_AT_START"):
                wait_for_the_mark(train)
            if rollout_id + 1 == warn_after:
                os.kill(os.getppid(), signal.SIGURG)
                wait_for_the_mark(train)
            # the driver's stop_requested: the clock (the custom config's stop time) or the trap's mark
            stop_at = custom["stalebench_stop_at"]
            stop = (stop_at is not None and time.time() >= stop_at) or os.path.exists(os.path.join(train, "stop_requested"))
            if stop and os.environ.get("FAKE_RAY_FAIL_AT_STOP"):
                sys.exit(1)  # the job dies after the warning, before the save
            if stop or (rollout_id + 1) % every == 0 or rollout_id == steps - 1:
                write_megatron_save(value("--save"), rollout_id)
                killed = fail_after < steps and rollout_id == fail_after - 1
                write_hf_save(value("--save-hf").format(rollout_id=rollout_id), shards_written=1 if killed else 3)
            if stop:  # the driver: a save after the current step, its mark, then a normal end
                with open(os.path.join(train, "stopped"), "w") as mark:
                    mark.write(str(rollout_id))
                break
    sys.exit(1 if fail_after < steps else 0)
'''


def fake_job_environment(tmp_path, monkeypatch) -> Path:
    """PATH with the fake `ray` and a `python3` that is this interpreter, slime's stand-in package on
    PYTHONPATH, a fake slime checkout with the model's script; returns the ray call log."""
    slime = tmp_path / "fake_slime"
    (slime / "scripts" / "models").mkdir(parents=True)
    (slime / "scripts" / "models" / "qwen3-30B-A3B.sh").write_text("MODEL_ARGS=(--num-layers 2 --hidden-size 8)\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(FAKE_RAY.format(python=sys.executable, tests=str(ROOT)))
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for tool in ("ray", "python3"):
        (bin_dir / tool).chmod(0o755)
    calls = tmp_path / "ray_calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # the job's pre-flight sees a file system that holds the run (the dev box's /tmp does not hold 1 TB)
    roomy = tmp_path / "roomy_fs"
    roomy.mkdir()
    (roomy / "sitecustomize.py").write_text("import shutil, types\n"
                                            "shutil.disk_usage = lambda path: types.SimpleNamespace(free=10**16)\n")
    monkeypatch.setenv("PYTHONPATH", f"{SUPPORT / 'slime_pkg'}{os.pathsep}{roomy}")
    monkeypatch.setenv("FAKE_RAY_CALLS", str(calls))
    return slime, calls


def fake_eval_server(config: dict, bin_dir: Path) -> None:
    """The config's evaluation server (the canary scores one problem with it) started as the preset starts it,
    through ``apptainer exec ... <image>``, but the image the pinned one where nodes reach it and `apptainer`
    a fake in ``bin_dir`` running the fake SGLang (tests/support/fake_sglang.py), at a free port; the AIME
    data the fixture's."""
    fake_apptainer(bin_dir)
    server = config["eval"]["server"]
    server.update(url=f"http://127.0.0.1:{free_ports(1)[0]}", ready_timeout=60,
                  command_prefix=[*server["command_prefix"][:-1], f"docker://{IMAGE}"])
    config["eval"]["data"]["aime24"] = str(FIXTURES / "aime_mini.jsonl")


def fake_slime_job(table1, tmp_path, monkeypatch):
    """A run config for the fake `ray` on PATH (steps 8, eval every 4); returns (run config, run dir, calls file)."""
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    table1.update(steps=8, eval_every=4)
    table1["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    return resolve_run_config(table1, "sat_grpo", 8, 0), GridDir.of(table1).run("sat_grpo", 8, 0).path, calls


def slime_grid(tmp_path, monkeypatch, grid: dict) -> tuple[Path, list[str], GridDir]:
    """A config file of the Table-1 preset narrowed by ``grid`` (lag 1, seed 0) whose jobs run the job
    script against the fake `ray` (fake_job_environment); returns it, its train jobs' outputs and its grid folder."""
    slime, _ = fake_job_environment(tmp_path, monkeypatch)
    config = {**table1_config(tmp_path), **grid}
    config["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    fake_eval_server(config, tmp_path / "bin")
    path = tmp_path / "slime_grid.yaml"
    path.write_text(yaml.safe_dump(config))
    folder = GridDir.of(config)
    return path, [str(folder.run(recipe, 1, 0).status_path) for recipe in grid["recipes"]], folder

