"""A resume with CPU-offloaded Adam on a GPU node (marked ``gpu``): the check for the day a node is lent.

    STALEBENCH_GPU_PATHS=paths.yaml python -m pytest -q -s -m gpu tests/engines/slime/test_slime_gpu_resume.py

Open upstream reports say a Megatron resume with the optimizer on the CPU can give wrong numbers
without a crash (Megatron-LM #1842, SkyRL #1403; slime's image patches the same ``step`` handling).
This runs the real slime entry through the project's launcher (engines.train -> engines.slime.launch ->
the job script -> Ray -> engines.slime.driver), inside the slime image (container_runtime: none), on one
8-GPU node with the Table-1 preset's model, layout and optimizer flags, cut to 5 steps of a small batch.
A resume can only pass where both sides train on the same rollouts, so (engines.slime.resume_check):

- recorded: 5 steps whose rollouts slime saves (``--save-debug-rollout-data``);
- uninterrupted, twice: 5 steps replaying them (``--load-debug-rollout-data``: SGLang is not started);
  the two give the noise floor, per metric, of the same run twice without a resume;
- interrupted: the same replay; the time-limit warning's mark is set once step 2's periodic save is
  whole; the driver stops after the step it is on, with a save, and the job exits 75 (TimeLimitReached);
  the run is then trained again to step 5 from that save. Its driver logs each rank's Adam ``step`` and
  moment norms when it stopped and after the resumed job loaded the save ($STALEBENCH_OPTIMIZER_LOG).

It passes when the loaded Adam state is the saved one (same step, moment norms within 1e-6) and every
step after the resume point logs the uninterrupted run's loss and grad norm within 3 x the noise floor
(at least 1e-6). The first such step reads only the saved weights; the ones after it are made by Adam's
update from the loaded moments and step count, which is what the reports get wrong: hence two steps at
least after the resume. Lag 0 (the synchronous loop), so that a resume keeps the uninterrupted schedule.

Needs, besides CUDA: slime, Megatron-LM and SGLang importable (the image), 8 GPUs, and
STALEBENCH_GPU_PATHS naming a YAML of the preset's engine_params paths on this node (hf_checkpoint,
ref_load, prompt_data). Skipped otherwise, with the reason.
"""
from __future__ import annotations

import importlib.util
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from engines.slime.resume_check import adam_problems, noise_floor, resume_problems
from engines.train import run as train
from grid.config import load
from grid.expand import resolve_run_config
from grid.folder import GridDir
from harness.engine import TimeLimitReached
from tests.support.paths import ROOT

STEPS, SAVE_EVERY = 5, 2
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(3 * 3600)]


def unavailable() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    absent = [name for name in ("slime", "megatron.core", "sglang") if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not importable: run it inside the slime image (docs/cluster.md, The image)"
    if torch.cuda.device_count() < 8:
        return f"{torch.cuda.device_count()} GPUs: the Table-1 job's layout needs one 8-GPU node"
    if not os.environ.get("STALEBENCH_GPU_PATHS"):
        return "STALEBENCH_GPU_PATHS names no YAML of engine_params paths (hf_checkpoint, ref_load, prompt_data)"
    return None


def config(results: Path, *extra_args: str, env: dict | None = None) -> dict:
    config = load(ROOT / "workflow" / "presets" / "table1.yaml")
    config.update(results_dir=str(results), steps=STEPS, eval_every=SAVE_EVERY, lags=[0], lag_mode="constant")
    config["engine_params"].update(yaml.safe_load(Path(os.environ["STALEBENCH_GPU_PATHS"]).read_text()))
    config["engine_params"].update(container_runtime="none", rollout_batch_size=8, n_samples_per_prompt=4,
                                   global_batch_size=32, rollout_max_response_len=1024, extra_args=list(extra_args),
                                   env=env or {})
    return config


def rows(config: dict) -> dict[int, dict]:
    return {row["step"]: row for row in GridDir.of(config).run("grpo", 0, 0).read_metrics()}


def completed(config: dict) -> dict[int, dict]:
    assert train(resolve_run_config(config, "grpo", 0, 0), GridDir.of(config).run("grpo", 0, 0).path) == "completed"
    return rows(config)


def test_a_resume_with_cpu_offloaded_adam_trains_the_uninterrupted_runs_numbers(tmp_path):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    recorded = tmp_path / "rollouts" / "rollout_{rollout_id}.pt"
    completed(config(tmp_path / "recorded", "--save-debug-rollout-data", str(recorded)))
    replay = ("--load-debug-rollout-data", str(recorded))
    uninterrupted, again = completed(config(tmp_path / "whole", *replay)), completed(config(tmp_path / "again", *replay))
    floor = noise_floor(uninterrupted, again)
    print(f"noise floor (relative, the same replayed run twice): {floor}")

    log = tmp_path / "optimizer.jsonl"
    cut = config(tmp_path / "cut", *replay, env={"STALEBENCH_OPTIMIZER_LOG": str(log)})
    run = GridDir.of(cut).run("grpo", 0, 0)
    outcome = {}

    def first_job():
        try:
            outcome["status"] = train(resolve_run_config(cut, "grpo", 0, 0), run.path)
        except TimeLimitReached as stop:
            outcome["stop"] = str(stop)

    job = threading.Thread(target=first_job)
    job.start()
    latest = run.engine_file("resume_checkpoints") / "latest_checkpointed_iteration.txt"
    while job.is_alive() and not (latest.is_file() and latest.read_text().strip() == str(SAVE_EVERY - 1)):
        time.sleep(0.5)
    run.engine_file("stop_requested").touch()  # as the job script's SIGURG trap marks the warning
    job.join()
    assert "stop" in outcome, outcome
    stopped = int(run.engine_file("stopped").read_text()) + 1  # the step the stop's save holds
    assert SAVE_EVERY <= stopped <= STEPS - 2, f"stopped after step {stopped}: no two steps left to compare"
    resumed = completed(cut)
    assert adam_problems(log) == [], log.read_text()
    assert resume_problems(uninterrupted, resumed, floor, after=stopped) == []
