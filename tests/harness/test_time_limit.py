"""The stop before a job's time limit by the clock (harness.engine.watch_time_limit): the job's end time
from SLURM's record (squeue %e, or $SLURM_JOB_END_TIME), ``now >= end - lead`` as the warning, the
signal as a second trigger; the tiny engine stopping on it with no signal and resuming identical."""
import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from engines.tiny.trainer import Trainer
from engines.train import run
from harness import engine as engines
from harness.engine import TimeLimitReached, job_end_time, parse_slurm_time
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows
from tests.support.workflow_cli import ROOT


def fake_squeue(tmp_path, monkeypatch, prints: str, status: int = 0):
    """A `squeue` on PATH that records its arguments and SLURM_TIME_FORMAT and prints ``prints``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "squeue_calls"
    (bin_dir / "squeue").write_text(f'#!/bin/sh\necho "$* $SLURM_TIME_FORMAT" >> {log}\necho "{prints}"\nexit {status}\n')
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_slurm_times_parse_in_local_time_and_unknown_ends_are_none():
    assert parse_slurm_time("2026-12-06T23:25:00\n") == datetime(2026, 12, 6, 23, 25).timestamp()
    for unknown in ("N/A", "Unknown", "NONE", ""):
        assert parse_slurm_time(unknown) is None
    with pytest.raises(ValueError, match="'12/06-23:25' is not in SLURM's standard format"):
        parse_slurm_time("12/06-23:25")


def test_the_end_time_comes_from_the_environment_else_squeue_in_the_standard_format(tmp_path, monkeypatch):
    assert job_end_time({}) == (None, "not a SLURM job (no SLURM_JOB_ID)")
    assert job_end_time({"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "1800000000"}) == (1800000000.0, "SLURM_JOB_END_TIME")
    log = fake_squeue(tmp_path, monkeypatch, "2026-12-06T23:25:00")
    # a user's SLURM_TIME_FORMAT (here: relative) would print a time that does not parse: squeue gets 'standard'
    end, source = job_end_time({**os.environ, "SLURM_JOB_ID": "7", "SLURM_TIME_FORMAT": "relative"})
    assert end == datetime(2026, 12, 6, 23, 25).timestamp() and source.startswith("squeue -j 7 -o %e")
    assert log.read_text() == "-h -j 7 -o %e standard\n"


def test_a_job_without_a_known_end_stops_at_the_signal_only(tmp_path, monkeypatch, time_limit):
    fake_squeue(tmp_path, monkeypatch, "N/A")  # a job with no time limit
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert "at SLURM's warning signal only (squeue -j 7 -o %e (N/A))" in time_limit(60)
    assert engines.stop_time() is None and engines.time_limit_near() is None
    fake_squeue(tmp_path, monkeypatch, "", status=1)
    assert "signal only (squeue failed" in time_limit(60)
    assert "signal only (no stop lead given)" in time_limit(None)


def test_the_clock_and_the_signal_each_mark_the_time_limit_near(time_limit):
    now = [0.0]
    line = time_limit(40, end_time=lambda: (1000.0, "a test"), clock=lambda: now[0])
    assert "40 s before the job's end (from a test), or at SLURM's warning signal" in line
    assert engines.stop_time() == 960.0
    now[0] = 959.9
    assert engines.time_limit_near() is None
    now[0] = 960.0
    assert engines.time_limit_near() == "the clock: the job's end less the stop lead"
    time_limit(40, end_time=lambda: (1000.0, "a test"), clock=lambda: 0.0)
    assert engines.time_limit_near() is None
    os.kill(os.getpid(), engines.TIME_LIMIT_SIGNAL)  # the second trigger
    assert engines.time_limit_near() == "SLURM's warning signal"


def test_the_tiny_trainer_stops_on_the_clock_and_resumes_identical(base, tmp_path, time_limit):
    """A fake clock that reads one second later at each poll (the trainer polls once per step), the end
    at 1000 s, the lead 995 s: the stop comes after step 5 with no signal; the resume ends as the
    uninterrupted run."""
    cfg = config(base, steps=8, eval_every=4)
    assert run(cfg, tmp_path / "reference") == "completed"
    ticks = iter(range(1, 100))
    time_limit(995, end_time=lambda: (1000.0, "a test"), clock=lambda: float(next(ticks)))
    with pytest.raises(TimeLimitReached, match=r"after step 5 of 8 .*\(stopped by the clock"):
        Trainer(RunConfig.check(cfg), RunDir(tmp_path / "stopped")).run()
    time_limit(None)
    assert Trainer(RunConfig.check(cfg), RunDir(tmp_path / "stopped")).run() == "completed"
    assert untimed_rows(tmp_path / "stopped/train/metrics.jsonl") == untimed_rows(tmp_path / "reference/train/metrics.jsonl")


@pytest.mark.slow  # two engine processes
def test_a_training_job_past_its_stop_time_exits_75_with_no_signal(base, tmp_path, monkeypatch):
    """engines.train in a SLURM job whose end (squeue's record) is already within the lead: it stops after
    its first step, exits 75 (EXIT_RESUME) naming the clock, and the retry outside SLURM ends identical."""
    cfg = config(base, steps=6, eval_every=3)
    assert run(cfg, tmp_path / "reference") == "completed"
    fake_squeue(tmp_path, monkeypatch, datetime.fromtimestamp(int(datetime.now().timestamp()) + 30).isoformat())
    command = [sys.executable, "-m", "engines.train", "--stop-lead", "60", "--run-dir", str(tmp_path / "stopped"),
               "--config-json", json.dumps(cfg)]
    stopped = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "SLURM_JOB_ID": "7"})
    assert stopped.returncode == engines.EXIT_RESUME, stopped.stderr
    assert "60 s before the job's end (from squeue -j 7" in stopped.stderr
    assert "stopped after step 1 of 6" in stopped.stderr and "(stopped by the clock" in stopped.stderr
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert untimed_rows(tmp_path / "stopped/train/metrics.jsonl") == untimed_rows(tmp_path / "reference/train/metrics.jsonl")
