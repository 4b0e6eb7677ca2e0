"""engines.slime.plan: the GPU-hour plan of a grid before submission (python -m engines.slime.launch --plan)."""
from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from engines.slime import footprint, plan
from engines.slime.params import resolve_params
from grid.config import load
from grid.jobs import train_retries
from grid.settings import Config
from tests.support.paths import ROOT

PRESET = ROOT / "workflow" / "presets" / "table1.yaml"


@pytest.fixture(scope="module")
def table1():
    return load(PRESET)


def test_the_table1_plan_adds_up_from_the_presets_steps_and_resources(table1):
    """By hand: a step of 15 (docs/cluster.md's derivation) to 38.7 min (20.48M tokens at NeMo-RL's
    1,102 tokens/s/GPU on 8 GPUs); per run 544 steps + 34 periodic saves (489 GB at 0.75 to 0.099
    GB/s) + a start per attempt (5-10 min) + a resumed attempt's read of its Megatron save (427 GB)."""
    p = plan.plan(Config.build(table1))
    assert len(p["jobs"]) == 14 * 2 * 3 and p["checkpoints"] == 544 // 16
    t, budget = plan.timings(Config.build(table1)), p["stop"]
    assert t["step"] == pytest.approx((15.0, 4096 * 5000 / (1102 * 8) / 60))
    job = p["jobs"][0]
    low = 544 * 15.0 + 34 * budget["save"][0] + 5.0  # one attempt: 8,530 min fit in the week less the lead
    working = 544 * t["step"][1] + 34 * budget["save"][1]
    stops = math.ceil((working + 10.0) / (10080 - budget["warning"])) - 1
    high = working + (stops + 1) * 10.0 + stops * budget["megatron_save"][1]
    assert job["train_gpu_hours"] == pytest.approx([low / 60 * 8, high / 60 * 8])
    assert job["stops"] == [0, stops] == [0, 2]
    checkpoint = plan.timings(Config.build(table1))["checkpoint"]
    assert job["eval_gpu_hours"] == pytest.approx([34 * m / 60 * 4 for m in checkpoint])
    assert p["total"]["train_gpu_hours"] == pytest.approx([84 * h for h in job["train_gpu_hours"]])
    assert p["retries"] == train_retries(table1) == 3
    assert max(p["swings"], key=p["swings"].get) == "minutes per step"  # what the report names as dominant
    assert p["swings"]["minutes per step"] == pytest.approx(84 * (544 * (t["step"][1] - 15) + 2 * 5.0 + 2 * (
        budget["megatron_save"][0])) / 60 * 8)  # two stops more at the slow step: their starts and loads


def test_the_users_timings_replace_the_estimates(table1):
    measured = {"step_minutes": 30, "checkpoint_minutes": [10, 12], "save_gb_per_s": 1}
    t = plan.timings(Config.build(table1), measured)
    assert (t["step"], t["checkpoint"]) == ((30.0, 30.0), (10.0, 12.0))
    assert "measured by the user" in t["step_source"] and "measured by the user" in t["checkpoint_source"]
    assert plan.plan(Config.build(table1), measured)["jobs"][0]["stops"] == [1, 1]
    with pytest.raises(ValueError, match="--timings step_minutes"):
        plan.timings(Config.build(table1), {"step_minutes": [20, 10]})


def test_the_evaluation_estimate_follows_the_requests_in_flight(table1):
    one = copy.deepcopy(table1)
    one["eval"]["server"]["concurrency"] = 1
    generation = [m - swap for m, swap in zip(plan.timings(Config.build(one))["checkpoint"], plan.SWAP_MINUTES)]
    parallel = [m - swap for m, swap in zip(plan.timings(Config.build(table1))["checkpoint"], plan.SWAP_MINUTES)]
    assert [a / b for a, b in zip(generation, parallel)] == pytest.approx([plan.SATURATION] * 2)


@pytest.mark.slow  # the CLI in a process (its imports)
def test_the_cli_prints_every_job_and_the_grid(tmp_path):
    result = subprocess.run([sys.executable, "-m", "engines.slime.launch", "--plan", str(PRESET)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith(("grpo ", "sat_gspo_r3 ")) for line in lines) == 2 * 2 * 3
    assert lines[-2].startswith("grid: training 95,593-269,106 GPU-h")
    assert lines[-1].startswith("  the training range is dominated by minutes per step:")
    assert not any("WARNING" in line for line in lines)  # the preset's lead covers its stop
    assert "not measured" in result.stdout  # an estimate says so
    (tmp_path / "timings.yaml").write_text("step_minutes: 20\ncheckpoint_minutes: 5\ndrain_minutes: 4\n"
                                           "save_gb_per_s: 10\nstartup_minutes: 0.01\n")
    measured = subprocess.run([sys.executable, "-m", "engines.slime.launch", "--plan", str(PRESET), "--timings",
                               str(tmp_path / "timings.yaml")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert measured.returncode == 0, measured.stderr
    save, load = 488.514 / 10 / 60, 427.450 / 10 / 60  # a periodic save, a resume's load, at the measured 10 GB/s
    training = 84 * (544 * 20 + 34 * save + 2 * 0.01 + load) / 60 * 8  # 10,908 min: one stop in a week less the lead
    assert f"grid: training {training:,.0f}-{training:,.0f} GPU-h" in measured.stdout
    assert "time-limit stop 4.8-4.8 min against a 120.8-min warning" in measured.stdout


def test_the_stop_is_budgeted_against_the_warning(table1):
    """drain (one training call, at most a step) + data-source save (none left) + a periodic save:
    Qwen3-30B-A3B's parameters x 16 bytes (bf16 weights, fp32 master weights and two Adam moments, the
    HF save) over the write bandwidth; a stop off the cadence writes the 14 Megatron bytes only. The
    preset's warning lead is that budget at its slow end; a shorter one is refused with the lead it needs."""
    times = plan.timings(Config.build(table1))
    budget = plan.stop(Config.build(table1), times)
    assert budget["parameters"] == pytest.approx(30.53e9, rel=2e-3)  # the model card's 30.5B
    assert budget["gigabytes"] == pytest.approx(budget["parameters"] * 16 / 1e9)
    assert budget["megatron_gigabytes"] == pytest.approx(budget["parameters"] * 14 / 1e9)
    fast, slow = (budget["gigabytes"] / rate / 60 for rate in reversed(plan.SAVE_GB_PER_S))
    assert budget["save"] == pytest.approx((fast, slow)) and budget["data_source"] == (0.0, 0.0)
    assert budget["total"] == pytest.approx([times["step"][0] + fast, times["step"][1] + slow])
    assert budget["lead_seconds"] == math.ceil(budget["total"][1] * 60) == 7249
    assert budget["warning"] == budget["lead_seconds"] / 60 and not budget["exceeds"]
    early = copy.deepcopy(table1)
    early["resources"]["train"] = {**table1["resources"]["train"], "slurm_extra": "--signal=URG@900"}
    with pytest.raises(ValueError, match=r"resources.train.slurm_extra: .* 15.0 min .* up to 120.8 min .*"
                                         r"--signal=URG@7249"):
        plan.plan(Config.build(early))


def test_measured_timings_and_the_config_move_the_stop_budget(table1):
    fast = plan.stop(Config.build(table1), plan.timings(Config.build(table1), {"drain_minutes": [2, 6], "save_gb_per_s": [5, 20]}))
    gigabytes = fast["gigabytes"]
    assert fast["save"] == pytest.approx((gigabytes / 20 / 60, gigabytes / 5 / 60))
    assert fast["total"] == pytest.approx((2 + gigabytes / 20 / 60, 6 + gigabytes / 5 / 60)) and not fast["exceeds"]
    no_optimizer = copy.deepcopy(table1)
    no_optimizer["engine_params"]["save_optimizer"] = False
    assert plan.stop(Config.build(no_optimizer), plan.timings(Config.build(no_optimizer)))["gigabytes"] == pytest.approx(gigabytes * 4 / 16)
    later = copy.deepcopy(table1)
    later.setdefault("resources", {})["train"] = {**table1["resources"]["train"], "slurm_extra": "--signal=B:URG@7800"}
    assert plan.stop(Config.build(later), plan.timings(Config.build(later)))["warning"] == 130 and not plan.stop(Config.build(later), plan.timings(Config.build(later)))["exceeds"]
    unwarned = copy.deepcopy(table1)
    unwarned["resources"]["train"] = {**table1["resources"]["train"], "slurm_extra": ""}
    assert plan.stop(Config.build(unwarned), plan.timings(Config.build(unwarned)))["warning"] is None
    assert not plan.stop(Config.build(unwarned), plan.timings(Config.build(unwarned)))["exceeds"]


def test_the_tuning_runs_are_jobs_of_the_plan(table1):
    tuned = load(PRESET, {"recipes": ["grpo", "sat_grpo"], "claims": [], "tuning": {
        "seeds": [100], "lags": [8], "recipes": {"grpo": {"param": ["eps_low", "eps_high"], "values": [0.2, 0.3]},
                                                 "sat_grpo": {"param": "alpha", "values": [0.9, 0.8]}}}})
    p = plan.plan(Config.build(tuned))
    assert (len(p["jobs"]), p["tuning_jobs"]) == (2 * 2 * 3 + 2 * 2 * 1, 4)
    assert [job["recipe"] for job in p["jobs"][-4:]] == ["grpo.eps_low_eps_high-0.2", "grpo.eps_low_eps_high-0.3",
                                                         "sat_grpo.alpha-0.9", "sat_grpo.alpha-0.8"]
    assert "16 training jobs (4 of them tuning runs" in plan.report(Config.build(tuned))
    assert plan.plan(Config.build(table1))["tuning_jobs"] == 0


def test_the_plan_holds_the_disk_and_host_memory_of_the_grid(table1):
    """Per grid: the peak when the last 64 jobs (the SLURM profile's jobs) are at theirs and the other 20
    runs keep what they keep, 84 x what a run keeps and writes; the jobs at once a file system holds
    (none when it cannot hold every run's kept saves); the host memory of the largest job (an R3 recipe at lag 8), which a too-small
    resources.train.mem_mb refuses with the numbers."""
    f = plan.plan(Config.build(table1))["footprint"]
    run = footprint.disk(resolve_params(table1["engine_params"]), 544, 16)
    assert (f["at_once"], f["grid_peak"], f["grid_kept"]) == (64, 20 * run["kept"] + 64 * run["peak"], 84 * run["kept"])
    assert f["grid_written"] == pytest.approx(1.395e15, rel=1e-3)  # the "1.4 PB written"
    assert f["memory_job"] == ("grpo_r3", 8) and f["memory"]["total"] == pytest.approx(1.177e12, rel=1e-3)
    text = plan.report(Config.build(table1))
    assert "disk per grid (estimate): peak 274 TB (the last 64 jobs at once at their peak" in text
    assert f"TB free here (df {plan.footprint._existing(Path(table1['results_dir']))}), which cannot hold the " \
        "runs' kept saves at any number of jobs at once" in text  # this machine's disk: under 246 TB
    kept, extra = 84 * run["kept"], run["peak"] - run["kept"]
    for free, fits in ((kept - 1, None), (kept, 0), (kept + 10 * extra + 1, 10), (kept + 100 * extra, 84)):
        with mock.patch.object(plan.footprint, "free_bytes", return_value=(free, "lfs quota")):
            assert plan.plan(Config.build(table1))["footprint"]["fits"] == fits, free
    assert "host memory per training job (estimate, the largest: grpo_r3 at lag 8): 1,177 GB" in text
    small = copy.deepcopy(table1)
    small["resources"]["train"]["mem_mb"] = 900_000
    with pytest.raises(ValueError, match=r"resources.train.mem_mb = 900,000 MB cannot hold grpo_r3 at lag 8: "
                                         r"1,177 GB at 5,000-token responses"):
        plan.plan(Config.build(small))
    no_r3 = load(PRESET, {"recipes": ["grpo", "gspo"], "claims": []})
    assert plan.plan(Config.build(no_r3))["footprint"]["memory"]["r3"] == 0


def test_the_plan_prints_each_jobs_ray_object_store_and_its_spill(table1):
    """By hand: an R3 job holds lag + 1 rollouts of int32 [4,096 samples x 5,000 tokens, 48 layers, top-8] in
    Ray's object store (283 GB at lag 8), 200 GB of it in memory, 83 GB spilled to the node's ray_temp_dir
    (the issue's 83 GB); a job without R3 holds none of them."""
    p = plan.plan(Config.build(table1))
    per_rollout = 4096 * 5_000 * 48 * 8 * 4
    jobs = {(job["recipe"], job["lag"]): job for job in p["jobs"]}
    assert jobs["grpo_r3", 8]["object_store_gb"][0] == pytest.approx(9 * per_rollout / 1e9)
    assert jobs["grpo_r3", 8]["spill_gb"][0] == pytest.approx((9 * per_rollout - 200e9) / 1e9)
    assert jobs["grpo_r3", 1]["spill_gb"][0] == 0 and jobs["grpo", 8]["object_store_gb"] == [0, 0]
    text = plan.report(Config.build(table1))
    assert "283 GB at 5,000-token responses in a 200 GB store: 83 GB spilled to /tmp/ray" in text
    assert "grpo_r3 8 0 | 1,138-3,204 | 5-14 | 0-2 | 283-1,739 | 83-1,539" in text
