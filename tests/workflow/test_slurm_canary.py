"""The canary on a real single-node SLURM cluster (tests/support/slurm_cluster.py), through
workflow/profiles/slurm: a two-run slime grid whose jobs run the job script against the fake `ray`
(tests/support/fake_ray.py), the slime engine's train resources moved to the CPU partition.
- a failing canary: SLURM sees one job, the canary's, and no train job is ever submitted (the profile's
  keep-going and retries notwithstanding);
- a passing canary: the train jobs are submitted only after the canary's job has ended.

Marked ``slurm`` (root and SLURM's packages; else a skip with the reason, or a failure where
STALEBENCH_REQUIRE names ``slurm``). ~5 min on a loaded 2-core box: the executor polls job states at
growing intervals.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time

import pytest

from tests.support.fake_ray import slime_grid
from tests.support.optional import missing
from tests.support.slurm_cluster import SlurmCluster, unavailable_reason
from tests.support.workflow_cli import ROOT, SNAKEMAKE

GRID = {"recipes": ["grpo", "gspo"], "lags": [1], "seeds": [0], "steps": 8, "eval_every": 4,
        # the slime engine's job size, on the test cluster's CPU partition (no GPU there); warned 40 s ahead
        "resources": {"train": {"gpu": 0, "mem_mb": 1000, "threads": 1, "runtime": 10, "slurm_partition": "cpu",
                                "slurm_extra": "--signal=URG@40"}}}
CLUSTER_WAIT, GRID_SECONDS = 1800, 900
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm_cluster"),
              pytest.mark.timeout(CLUSTER_WAIT + 2 * GRID_SECONDS + 300)]


def submitted(cluster, command: list[str], env: dict) -> tuple[int, list[str], str]:
    """Run ``command`` to its end; returns its exit status, the rule of every SLURM job it submitted (by job
    id: in submission order) and its output."""
    earlier = {job for job, *_ in cluster.squeue("%i")}  # a job of an earlier command slurmctld still shows
    jobs = {}
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: nobody reads a pipe while we poll
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    try:
        while process.poll() is None:
            assert time.monotonic() - start < GRID_SECONDS, f"the grid took over {GRID_SECONDS} s"
            jobs.update({job: (comment, state) for job, comment, state in cluster.squeue("%i", "%k", "%T")})
            time.sleep(1)
    finally:
        if process.poll() is None:
            process.kill()
    jobs.update({job: (comment, state) for job, comment, state in cluster.squeue("%i", "%k", "%T")})
    log.seek(0)
    rules = [re.match(r"rule_([a-z]+)", jobs[job][0]).group(1) for job in sorted(set(jobs) - earlier, key=int)]
    return process.returncode, rules, log.read()


def test_one_canary_job_before_the_grid_and_none_after_it_fails(tmp_path, monkeypatch):
    reason = unavailable_reason()
    if reason:
        missing("slurm", reason)
    path, targets, folder = slime_grid(tmp_path, monkeypatch, GRID)
    with tempfile.TemporaryDirectory(prefix="stalebench-slurm-") as root:
        cluster = SlurmCluster(root).start(wait=CLUSTER_WAIT)
        try:
            # the fake ray and slime's stand-in reach the jobs through the environment sbatch exports
            env = {**cluster.env, **{key: os.environ[key] for key in ("PATH", "FAKE_RAY_CALLS")},
                   "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]])}
            command = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "state"), "--profile",
                       str(ROOT / "workflow" / "profiles" / "slurm"), "--slurm-init-seconds-before-status-checks", "2",
                       "--slurm-logdir", str(tmp_path / "slurm_logs"), *targets, "--configfile", str(path)]

            code, rules, output = submitted(cluster, command, {**env, "FAKE_RAY_FAIL_AFTER": "0"})
            assert code != 0, output[-3000:]
            assert rules == ["canary"], (rules, output[-3000:])
            assert "no other train job of the grid is submitted" in output
            assert not (folder.path / "runs").exists()

            code, rules, output = submitted(cluster, command, env)
            assert code == 0, output[-3000:]
            assert rules == ["canary", "train", "train"], rules
            # the canary's job had ended when the first train job was submitted
            assert output.index("(Rule: canary)") < output.index("rule train:"), output[-3000:]
        finally:
            cluster.stop()
