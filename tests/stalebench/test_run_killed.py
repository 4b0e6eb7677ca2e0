"""A killed workflow resumes with the command that started it (issue 64): `kill -9` of a running
`stalebench run` (the command, Snakemake and its jobs, as a lost terminal does) leaves Snakemake's lock and
incomplete markers; the same command again clears them itself, says so in one line, and ends with the claims
and numbers of a run that was never killed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stalebench.workflow import left_behind
from tests.support.paths import ROOT

STALEBENCH = str(Path(sys.executable).with_name("stalebench"))
GRID = {"grid": "small", "recipes": ["grpo"], "baseline": "grpo", "lags": [1, 8], "seeds": [0, 1], "seeding": None,
        "steps": 6, "eval_every": 2, "engine_params": {"preset": "demo", "warmstart_steps": 10},
        "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}},
        "claims": [{"name": "cost", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
                    "smallest_effect": 0.1}]}


def command(folder: Path) -> list[str]:
    return [STALEBENCH, "run", "-c2", "-d", str(folder / "state"), "-C", f"results_dir={folder / 'results'}",
            *(f"{key}={json.dumps(value)}" for key, value in GRID.items())]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def claims(folder: Path) -> tuple:
    """The claims and every run's numbers (d-bar: the training's own, nonzero after 6 steps)."""
    summary = json.loads((folder / "results" / "small" / "summary.json").read_text())
    return summary["claims"], [(c["recipe"], c["lag"], c["per_seed"]) for c in summary["cells"]]


@pytest.mark.slow  # two small grids trained by Snakemake
@pytest.mark.timeout(1500)
def test_kill_9_then_the_same_command_finishes_with_the_uninterrupted_claims(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = subprocess.run(command(whole), capture_output=True, text=True, timeout=700, env=env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.rstrip().splitlines()
    assert lines[-2].startswith("stalebench: the claims: http://") and lines[-1].endswith("small/table.md")

    running = subprocess.Popen(command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(),
                               start_new_session=True)
    metrics = killed / "results" / "small" / "runs" / "grpo" / "lag8" / "seed1" / "train" / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        assert running.poll() is None, "the workflow ended before it was killed"
        time.sleep(0.2)
    os.killpg(running.pid, signal.SIGKILL)  # the command, Snakemake and every job at once
    running.wait()
    state = killed / "state" / ".snakemake"
    assert any((state / "locks").iterdir()) and any((state / "incomplete").iterdir())  # what a kill leaves

    again = subprocess.run(command(killed), capture_output=True, text=True, timeout=700, env=env())
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-4000:]
    assert said.count("was killed; cleared its Snakemake locks and incomplete") == 1, said[-4000:]
    assert claims(killed) == claims(whole)
    assert left_behind(killed / "state") == []  # a clean end leaves nothing to clear
