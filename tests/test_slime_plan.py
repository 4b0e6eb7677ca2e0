"""engines.slime.plan: the GPU-hour plan of a grid before submission (python -m engines.slime.launch --plan)."""
from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engines.slime import plan
from harness.config import load
from harness.jobs import train_retries

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "workflow" / "presets" / "table1.yaml"


@pytest.fixture(scope="module")
def table1():
    return load(PRESET)


def test_the_table1_plan_adds_up_from_the_presets_steps_and_resources(table1):
    p = plan.plan(table1)
    assert len(p["jobs"]) == 14 * 2 * 3 and p["checkpoints"] == 544 // 16
    low, high = plan.STEP_MINUTES
    job = p["jobs"][0]
    assert job["train_gpu_hours"] == pytest.approx([544 * low / 60 * 8, 544 * high / 60 * 8])
    checkpoint = plan.timings(table1)["checkpoint"]
    assert job["eval_gpu_hours"] == pytest.approx([34 * m / 60 * 4 for m in checkpoint])
    assert job["stops"] == [math.ceil(544 * m / 10080) - 1 for m in (low, high)] == [0, 1]
    assert p["total"]["train_gpu_hours"] == pytest.approx([84 * h for h in job["train_gpu_hours"]])
    assert p["retries"] == train_retries(table1)


def test_the_users_timings_replace_the_estimates(table1):
    measured = {"step_minutes": 30, "checkpoint_minutes": [10, 12]}
    t = plan.timings(table1, measured)
    assert (t["step"], t["checkpoint"]) == ((30.0, 30.0), (10.0, 12.0))
    assert "measured by the user" in t["step_source"] and "measured by the user" in t["checkpoint_source"]
    assert plan.plan(table1, measured)["jobs"][0]["stops"] == [math.ceil(544 * 30 / 10080) - 1] * 2
    with pytest.raises(ValueError, match="--timings step_minutes"):
        plan.timings(table1, {"step_minutes": [20, 10]})


def test_the_evaluation_estimate_follows_the_requests_in_flight(table1):
    one = copy.deepcopy(table1)
    one["eval"]["server"]["concurrency"] = 1
    generation = [m - swap for m, swap in zip(plan.timings(one)["checkpoint"], plan.SWAP_MINUTES)]
    parallel = [m - swap for m, swap in zip(plan.timings(table1)["checkpoint"], plan.SWAP_MINUTES)]
    assert [a / b for a, b in zip(generation, parallel)] == pytest.approx([plan.SATURATION] * 2)


@pytest.mark.slow  # the CLI in a process (its imports)
def test_the_cli_prints_every_job_and_the_grid(tmp_path):
    result = subprocess.run([sys.executable, "-m", "engines.slime.launch", "--plan", str(PRESET)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith(("grpo ", "sat_gspo_r3 ")) for line in lines) == 2 * 2 * 3
    assert lines[-1].startswith("grid: training 91,392-152,320 GPU-h")
    assert "not measured" in result.stdout  # an estimate says so
    (tmp_path / "timings.yaml").write_text("step_minutes: 20\ncheckpoint_minutes: 5\n")
    measured = subprocess.run([sys.executable, "-m", "engines.slime.launch", "--plan", str(PRESET), "--timings",
                               str(tmp_path / "timings.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert measured.returncode == 0, measured.stderr
    assert f"grid: training {84 * 544 * 20 / 60 * 8:,.0f}-{84 * 544 * 20 / 60 * 8:,.0f} GPU-h" in measured.stdout
