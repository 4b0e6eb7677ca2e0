"""The canary's place in the workflow (workflow/rules/train.smk: an engine with Engine.canary): a slime grid
through the real `snakemake`, its jobs' job scripts against the fake `ray` (tests/support/fake_ray.py).
One job, the canary, runs before every train job; a failing canary stops the grid before any train job
starts, also under --keep-going (the SLURM profile's)."""
from __future__ import annotations

import re

import pytest

from grid.folder import GridDir
from tests.support import fake_ray
from tests.support.workflow_cli import job_counts, planned_jobs, snakemake

GRID = {"recipes": ["grpo", "gspo"], "lags": [1], "seeds": [0], "steps": 8, "eval_every": 4}
pytestmark = pytest.mark.slow  # Snakemake runs jobs of the job script with a fake ray


@pytest.fixture
def slime_grid(tmp_path, monkeypatch):
    """(config file, the train jobs' outputs, the grid folder) of a two-run slime grid with the fake `ray`."""
    return fake_ray.slime_grid(tmp_path, monkeypatch, GRID)


def started_rules(output: str) -> list[str]:
    """The rules of the jobs Snakemake started, in the order it started them."""
    return re.findall(r"^(?:local)?rule (\w+):$", output, re.MULTILINE)


def test_the_canary_runs_alone_before_every_train_job(slime_grid, tmp_path):
    config, targets, folder = slime_grid
    plan = snakemake("-n", *targets, "--configfile", str(config), workdir=tmp_path / "dry")
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = planned_jobs(plan.stdout + plan.stderr)
    assert job_counts(plan.stdout + plan.stderr)["canary"] == 1 and [rule for rule, _ in jobs].count("train") == 2
    done = snakemake("-c2", *targets, "--configfile", str(config), workdir=tmp_path / "run", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    order = started_rules(done.stderr)
    assert order[0] == "canary" and order.count("train") == 2, order
    canary = folder.canary_path.stat().st_mtime
    for status in targets:  # every train job started after the canary's report was written
        assert GridDir(folder.path).run(*_run_of(status)).config_path.stat().st_mtime > canary


def test_a_failing_canary_stops_the_grid_before_any_train_job(slime_grid, tmp_path, monkeypatch):
    config, targets, folder = slime_grid
    monkeypatch.setenv("FAKE_RAY_FAIL_AFTER", "0")  # the canary's job dies before its first rollout
    done = snakemake("-c2", "--keep-going", *targets, "--configfile", str(config), workdir=tmp_path / "run",
                     timeout=900)
    assert done.returncode != 0
    assert started_rules(done.stderr) == ["canary"], done.stderr[-3000:]
    assert "no other train job of the grid is submitted" in done.stderr  # the log's reason, shown by the rule
    assert not folder.canary_path.exists() and not (folder.path / "runs").exists()


def _run_of(status: str) -> tuple[str, int, int]:
    recipe, lag, seed = re.search(r"runs/([^/]+)/lag(\d+)/seed(\d+)/", status).groups()
    return recipe, int(lag), int(seed)
