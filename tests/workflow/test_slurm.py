"""The workflow on a real single-node SLURM cluster (tests/support/slurm_cluster.py), through
workflow/profiles/slurm, compared with the same grid run locally.

The cluster tracks processes as GPU sites do, with proctrack/cgroup where this machine allows it
(tests/support/slurm_cluster.py probes; the test prints which ran). One invocation exercises what goes
wrong on clusters, and must still finish the grid by itself:
- every training job has a two-minute limit and a 40 s stop lead, and gets NO warning signal: its
  `--signal=B:URG@40` goes to the batch shell only, as a cgroup site's warning reaches only the
  job step's inner snakemake. Each trainer stops by the clock (harness.engine.watch_time_limit: the
  end time squeue records for its job, less the lead) with its resume state, exits 75, and the
  profile's retries continue it (never a TIMEOUT), so each run needs two or more jobs;
- a second writer (engines.train by hand on a run whose training job is running) fails at once,
  naming that SLURM job;
- that training job is then cancelled (scancel): squeue reports CANCELLED and the profile retries it.
  It is suspended first (scontrol suspend), so its time-limit warning cannot end it while we act.
The runs' metrics.jsonl, their scores and the table must equal the local run's, byte for byte.

Marked ``slurm``, with its own time limit (TIME_LIMIT, over pytest's per-test 900 s). Needs root and
SLURM installed beforehand (`python -m tests.support.slurm_cluster install`, as .ci/run does): else
a skip with the reason, or a failure where STALEBENCH_REQUIRE names ``slurm``. Slow (9 min on a
loaded 2-core box): the executor polls job states at growing intervals (2, 14, 36, 68 s after a submission).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from engines.tiny.warmstart import build_base
from engines.train import run
from grid.config import load
from grid.expand import grid_dir, resolve_run_config
from grid.folder import GridDir
from harness.cli import EXIT_LOCKED
from harness.io import read_jsonl
from tests.support.optional import missing
from tests.support.slurm_cluster import SlurmCluster, unavailable_reason
from tests.support.untimed import untimed_rows
from tests.support.workflow_cli import ROOT, SNAKEMAKE, snakemake

OVERRIDES = {
    "grid": "slurm", "recipes": ["grpo"], "lags": [1, 2], "seeds": [0], "baseline": "grpo", "claims": [],
    "engine_params": {"preset": "demo", "warmstart_steps": 20},
    "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 16}},
    # Two-minute jobs that stop 40 s before their end by the clock, 80 s into a job: after its trainer
    # started. B: sends SLURM's warning to the batch shell alone, never to the job step that trains.
    "resources": {"train": {"runtime": 2, "slurm_extra": "--signal=B:URG@40"}},
}
# per run: more than one job trains before its stop (at most ~65 s), with room for the machine to run 2x faster
# than when the probe measured it (a run that finished inside its first job stopped by no clock: seen once)
TRAINING_SECONDS = 150
CANCELLED_RUN = ("grpo", 2, 0)
GRID_SECONDS, LOCAL_SECONDS = 1200, 900  # the SLURM grid's and the local grid's limits
CLUSTER_WAIT = 1800  # for another suite's test cluster on this machine to stop (one per machine)
# The whole test: the wait, cluster start, the probe run that sizes the grid, both grids and the comparison.
TIME_LIMIT = CLUSTER_WAIT + GRID_SECONDS + LOCAL_SECONDS + 600
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm_cluster"), pytest.mark.timeout(TIME_LIMIT)]


def sized_grid(folder: Path) -> dict:
    """OVERRIDES with steps that keep a run training for ~TRAINING_SECONDS on this machine now
    (measured on a 40-step run), so that every run needs two or more jobs however fast the
    machine; 4 checkpoints per run."""
    config = load(ROOT / "config.yaml", {"results_dir": str(folder), **OVERRIDES, "steps": 40, "eval_every": 40})
    probe = {**config, "grid": "probe"}  # a grid of its own: its run folder is laid out as a grid's
    build_base(probe["engine_params"], grid_dir(probe) / "base")
    run(resolve_run_config(probe, "grpo", 1, 0), GridDir.of(probe).run("grpo", 1, 0).path)
    seconds = sum(GridDir.of(probe).run("grpo", 1, 0).read_status()["seconds"].values()) / 40
    steps = max(200, 40 * math.ceil(TRAINING_SECONDS / seconds / 40))
    return {**OVERRIDES, "steps": steps, "eval_every": steps // 4}


def overrides(results: Path, grid: dict) -> list[str]:
    return ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in grid.items())]


@pytest.fixture(scope="module")
def cluster():
    reason = unavailable_reason()
    if reason:
        missing("slurm", reason)
    with tempfile.TemporaryDirectory(prefix="stalebench-slurm-") as root:
        cluster = SlurmCluster(root).start(wait=CLUSTER_WAIT)
        print(f"SLURM test cluster: ProctrackType={cluster.proctrack} ({cluster.proctrack_note})")
        try:
            yield cluster
        finally:
            cluster.stop()


def job_table(cluster) -> dict[str, dict]:
    """Every job slurmctld still knows: id -> state, partition, comment (the plugin's rule + wildcards)."""
    return {job: {"state": state, "partition": partition, "comment": comment}
            for job, state, partition, comment in cluster.squeue("%i", "%T", "%P", "%k")}


def held(lock: Path) -> bool:
    """Whether a process holds the run's writer lock (harness.lock: flock on the file), read from
    /proc/locks: trying the lock ourselves could make a starting trainer fail to get it."""
    stat = lock.stat()
    file = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(fields[1] == "FLOCK" and fields[5] == file
               for fields in map(str.split, Path("/proc/locks").read_text().splitlines()) if len(fields) > 5)


def test_grid_through_slurm_stops_by_the_clock_with_no_signal_and_survives_cancel_and_a_second_writer(cluster):
    with tempfile.TemporaryDirectory(prefix="stalebench-slurm-grid-") as folder:
        folder = Path(folder)
        grid = sized_grid(folder / "probe")
        print(f"SLURM grid: {grid['steps']} steps per run")
        config = load(ROOT / "config.yaml", {"results_dir": str(folder / "slurm"), **grid})
        table = grid_dir(config) / "table.md"
        target = GridDir.of(config).run(*CANCELLED_RUN).path
        start = time.monotonic()
        log = open(folder / "snakemake.log", "w")  # a file, not a pipe: nobody reads a pipe while we poll
        process = subprocess.Popen(
            [SNAKEMAKE, "--profile", "workflow/profiles/slurm", "--slurm-init-seconds-before-status-checks", "2",
             "--slurm-logdir", str(folder / "slurm_logs"), str(table), *overrides(folder / "slurm", grid)],
            cwd=ROOT, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, text=True)
        jobs, second_writer, cancelled = {}, None, None
        try:
            while process.poll() is None:
                assert time.monotonic() - start < GRID_SECONDS, f"the SLURM grid took over {GRID_SECONDS} s"
                jobs.update(job_table(cluster))
                # a running training job of the lag-2 run whose trainer holds the run's lock
                lock = target / "locks" / "train.lock"
                holder = json.loads(lock.read_text() or "{}").get("slurm_job_id") if lock.exists() else None
                running = [job for job, info in jobs.items() if info["state"] == "RUNNING" and job == holder]
                first_checkpoint = target / "train" / "checkpoints" / f"step_{grid['eval_every']}"
                # Suspended, it cannot reach its time-limit warning while we act. A job that ended
                # meanwhile (its trainer let go of the lock) is resumed and its retry taken instead.
                if cancelled is None and running and first_checkpoint.exists() \
                        and cluster.scontrol("suspend", running[0]).returncode == 0:
                    if held(lock):
                        # README's recovery mistake: training the same run by hand while its job runs
                        second_writer = subprocess.run(
                            [sys.executable, "-m", "engines.train", "--run-dir", str(target), "--config-json",
                             str(target / "config.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
                        second_writer = (running[0], second_writer)
                        subprocess.run(["scancel", running[0]], env=cluster.env, check=True)
                        cancelled = running[0]
                    else:
                        cluster.scontrol("resume", running[0])
                time.sleep(1)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
        output = (folder / "snakemake.log").read_text()
        wall = time.monotonic() - start
        jobs.update(job_table(cluster))
        assert process.returncode == 0, output[-5000:]
        print(f"SLURM grid: {wall:.0f} s, {len(jobs)} SLURM jobs")

        assert cancelled is not None, "no running training job of the lag-2 run was found to cancel"
        job, result = second_writer
        assert result.returncode == EXIT_LOCKED and f"SLURM job {job}" in result.stderr, result.stderr
        assert jobs[cancelled]["state"] == "CANCELLED"
        train_jobs = {job: info for job, info in jobs.items() if "rule_train" in info["comment"]}
        states = [info["state"] for info in train_jobs.values()]
        assert "TIMEOUT" not in states and "FAILED" in states, states
        # the failed jobs' logs (show-failed-logs): trainers that stopped by the clock, none by a signal
        assert "before the job's time limit; resume state saved" in output
        assert "(stopped by the clock" in output and "stopped by SLURM's warning signal" not in output
        assert "40 s before the job's end (from squeue -j" in output  # each trainer read its job's end
        assert {info["partition"] for info in jobs.values()} == {"cpu"}  # tiny engine: CPU partition only

        local_config = load(ROOT / "config.yaml", {"results_dir": str(folder / "local"), **grid})
        local = snakemake("-c2", str(grid_dir(local_config) / "table.md"), *overrides(folder / "local", grid),
                          timeout=LOCAL_SECONDS)
        assert local.returncode == 0, local.stderr[-3000:]
        for lag in grid["lags"]:
            ours, theirs = GridDir.of(config).run("grpo", lag, 0).path, GridDir.of(local_config).run("grpo", lag, 0).path
            assert untimed_rows(ours / "train/metrics.jsonl") == untimed_rows(theirs / "train/metrics.jsonl"), lag
            # the scores and their eval keys: the run key does not name the grid's results folder
            assert read_jsonl(ours / "eval/tiny_test.jsonl") == read_jsonl(theirs / "eval/tiny_test.jsonl"), lag
        # the numbers; table.md also lists where and how long each job ran, which differs by design
        assert (table.parent / "table.csv").read_text() == (grid_dir(local_config) / "table.csv").read_text()
