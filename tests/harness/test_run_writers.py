"""One writer per run (harness.lock), per-step logs that only grow, and the stop before a job's
time limit (SLURM's warning signal -> resume state, exit 75 -> the retry ends bit-identical)."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from engines.train import run
from grid.config import load
from grid.jobs import train_retries
from harness import engine as engines
from harness.cli import EXIT_LOCKED
from harness.io import append_jsonl_atomic, read_jsonl
from harness.lock import RunLocked, writer_lock
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows
from tests.support.waiting import wait_until
from tests.support.workflow_cli import ROOT


def engines_run(cfg, run_dir, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "engines.train", "--run-dir", str(run_dir), "--config-json",
                             json.dumps(cfg)], cwd=ROOT, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow  # an engine process
def test_a_second_writer_fails_at_once_naming_the_holder(base, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    cfg = config(base, steps=4)
    with writer_lock(tmp_path / "r" / "locks" / "train.lock", "train"):
        start = time.monotonic()
        second = engines_run(cfg, tmp_path / "r")
        _, err = second.communicate(timeout=120)
        assert second.returncode == EXIT_LOCKED and time.monotonic() - start < 60
        assert f"pid {os.getpid()}" in err and "SLURM job 4242" in err and "scancel 4242" in err, err
        assert not (tmp_path / "r" / "train").exists()  # it wrote nothing
        with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
            run(cfg, tmp_path / "r")
    assert run(cfg, tmp_path / "r") == "completed"  # released with the block


def test_the_lock_dies_with_its_holder_and_its_taker_says_so(tmp_path, capfd):
    path = tmp_path / "locks" / "train.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from harness.lock import writer_lock\n"
                               f"with writer_lock({str(path)!r}, 'train'):\n print('held', flush=True); time.sleep(600)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunLocked, match=f"pid {holder.pid}"):
        with writer_lock(path, "train"):
            pass
    holder.kill()  # kill -9: no clean-up runs, the kernel drops the lock
    holder.wait()
    capfd.readouterr()
    with writer_lock(path, "train"):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert f"taking over the lock of host {socket.gethostname()}, pid {holder.pid}," in capfd.readouterr().err
    with writer_lock(path, "train"):  # released by its holder: nothing to take over
        pass
    assert "taking over" not in capfd.readouterr().err


def test_a_step_log_refuses_a_step_that_is_not_after_the_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_jsonl_atomic(path, [{"step": 1}, {"step": 2}], increasing="step")
    for rows in ([{"step": 2}], [{"step": 3}, {"step": 3}], [{"step": 1}]):
        with pytest.raises(ValueError, match="refusing step"):
            append_jsonl_atomic(path, rows, increasing="step")
    assert [row["step"] for row in read_jsonl(path)] == [1, 2]  # nothing of a refused append was written


@pytest.mark.slow  # two engine processes
def test_time_limit_warning_saves_resume_state_and_the_retry_ends_identical(base, tmp_path):
    cfg = config(base, recipe="grpo", lag=2, steps=30, eval_every=7)
    reference = tmp_path / "reference"
    run(cfg, reference)
    stopped = tmp_path / "stopped"
    process = engines_run(cfg, stopped)
    wait_until((stopped / "train" / "checkpoints" / "step_7").exists, "the checkpoint of step 7", process)
    process.send_signal(engines.TIME_LIMIT_SIGNAL)
    _, err = process.communicate(timeout=120)
    assert process.returncode == engines.EXIT_RESUME, err
    rows = read_jsonl(stopped / "train" / "metrics.jsonl")
    last = json.loads((stopped / "train" / "resume" / "state.json").read_text())["step"]
    assert 7 <= last < 30 and [row["step"] for row in rows] == list(range(1, last + 1))  # every step it trained
    assert f"stopped after step {last} of 30" in err
    assert not (stopped / "train" / "status.json").exists()  # not failed: to be continued
    checkpoints = sorted(int(p.name.split("_")[1]) for p in (stopped / "train" / "checkpoints").iterdir())
    assert all(step % 7 == 0 for step in checkpoints)  # no extra checkpoint: evaluation is unchanged

    again = engines_run(cfg, stopped)
    assert again.wait(timeout=300) == 0, again.stderr.read()
    assert untimed_rows(stopped / "train" / "metrics.jsonl") == untimed_rows(reference / "train" / "metrics.jsonl")
    status = [{k: v for k, v in json.loads((d / "train" / "status.json").read_text()).items() if k != "seconds"}
              for d in (stopped, reference)]
    assert status[0] == status[1] and status[0]["status"] == "completed"
    assert sorted(p.name for p in (stopped / "train" / "checkpoints").iterdir()) == \
        sorted(p.name for p in (reference / "train" / "checkpoints").iterdir())


def test_training_retries_cover_the_step_budget_within_the_time_limit():
    """By hand: table1's 544 steps x 39 min = 21216 min of training. A week's job (10080 min, warned
    7249 s = 120.8 min ahead: 9959.2 usable) needs 3 jobs; a day's (1319.2 usable) 21216 / 1319.2 = 16.1
    -> 17 jobs.
    Retries = jobs - 1 resubmissions + 1 spare = jobs."""
    slime = load(ROOT / "workflow" / "presets" / "table1.yaml")
    assert (slime["steps"], engines.get("slime").step_minutes) == (544, 39)  # the figures above
    assert train_retries(slime) == 3
    day = {**slime, "resources": {"train": {"runtime": 60 * 24}}}
    assert train_retries(day) == 17
    assert train_retries(load(ROOT / "config.yaml")) == 1  # tiny: one job, one spare
    with pytest.raises(ValueError, match="resources.train.runtime"):
        train_retries({**slime, "resources": {"train": {"runtime": 10}}})
