"""Lag modes on the tiny engine: the bounded schedule, the realized-lag bound check (a planted
schedule past its bound fails the run naming the step), lag 0 = the synchronous loop, R2 routing
replay and fp16 rollouts."""
import json

import pytest
import torch

import engines.tiny.trainer
from engines.tiny import task
from engines.tiny.batch import step_seed
from engines.tiny.trainer import Trainer
from engines.train import run
from harness import lag as lag_schedule
from harness.io import read_jsonl
from harness.lag import LagOutOfBound, bounded_draw, check_realized_lag, lag_bound, sampling_version
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows

QUEUE = {"utilization": 1.5, "concurrency": 4, "capacity": 4, "length_sigma": 1.0}  # 4 groups per step (SMALL)


def realized_lags(run_dir) -> list[int]:
    return [row["realized_lag"] for row in read_jsonl(run_dir / "train" / "metrics.jsonl")]


def test_the_schedules_by_hand():
    steps = range(1, 11)
    assert [s - 1 - sampling_version(s, 3, "interval", 0) for s in steps] == [0, 1, 2, 3, 1, 2, 3, 1, 2, 3]
    assert [s - 1 - sampling_version(s, 3, "constant", 0) for s in steps] == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3]
    for mode in lag_schedule.LAG_MODES:  # lag 0: the batch of step s is sampled by version s - 1
        assert [sampling_version(s, 0, mode, 5) for s in steps] == [s - 1 for s in steps]
    draws = [bounded_draw(s, 4, 7) for s in range(1, 201)]
    assert set(draws) == set(range(5)) and draws != [bounded_draw(s, 4, 8) for s in range(1, 201)]
    versions = [sampling_version(s, 4, "bounded", 7) for s in range(1, 201)]
    assert all(a <= b for a, b in zip(versions, versions[1:]))  # weights only move forward
    for step, (version, draw) in enumerate(zip(versions, draws), start=1):
        assert 0 <= step - 1 - version <= min(draw, step - 1)
        assert version == max(versions[step - 2] if step > 1 else 0, step - 1 - draw)


def test_the_bound_of_each_mode():
    assert lag_bound(1, 8, "interval") == (0, 0) and lag_bound(5, 8, "interval") == (1, 4)
    assert lag_bound(20, 8, "interval") == (1, 8) and lag_bound(20, 8, "constant") == (8, 8)
    assert lag_bound(20, 8, "bounded") == (0, 8) and lag_bound(20, 8, "constant", start_version=15) == (4, 4)
    assert lag_bound(20, 8, "queue") == (0, 8) and lag_bound(3, 8, "queue") == (0, 2)
    check_realized_lag(20, 8, 8, "interval")
    with pytest.raises(LagOutOfBound, match=r"step 20: realized lag 9 leaves the interval bound 1\.\.8 of lag 8"):
        check_realized_lag(20, 9, 8, "interval")
    with pytest.raises(LagOutOfBound, match="step 7: realized lag 0 leaves the interval bound"):
        check_realized_lag(7, 0, 8, "interval")
    with pytest.raises(ValueError, match="lag_mode must be one of"):
        lag_bound(3, 2, "random")


def test_bounded_lag_realizes_its_seeded_schedule(base, tmp_path):
    lag, steps = 3, 12
    for seed in (0, 1):
        assert run(config(base, lag=lag, mode="bounded", steps=steps, eval_every=4, seed=seed),
                   tmp_path / f"seed{seed}") == "completed"
        assert realized_lags(tmp_path / f"seed{seed}") == \
            [s - 1 - sampling_version(s, lag, "bounded", seed) for s in range(1, steps + 1)]
    assert realized_lags(tmp_path / "seed0") != realized_lags(tmp_path / "seed1")
    assert set(realized_lags(tmp_path / "seed0")) - {0} and 0 in realized_lags(tmp_path / "seed0")[1:]


@pytest.mark.parametrize("mode", ["bounded", "queue"])  # queue: the batch in flight keeps its groups' versions
def test_a_seeded_lag_resumes_bit_identical_after_a_time_limit_stop(base, tmp_path, monkeypatch, mode):
    cfg = config(base, lag=3, mode=mode, steps=10, eval_every=3, seed=1, lag_queue=QUEUE)
    assert run(cfg, tmp_path / "reference") == "completed"
    polls = iter(range(1, 100))
    monkeypatch.setattr(engines.tiny.trainer, "time_limit_near", lambda: next(polls) == 5)
    with pytest.raises(engines.tiny.trainer.TimeLimitReached, match="after step 5"):
        Trainer(RunConfig.check(cfg), RunDir(tmp_path / "stopped")).run()
    monkeypatch.undo()
    assert run(cfg, tmp_path / "stopped") == "completed"
    assert untimed_rows(tmp_path / "stopped" / "train" / "metrics.jsonl") == \
        untimed_rows(tmp_path / "reference" / "train" / "metrics.jsonl")


def test_a_schedule_past_its_bound_fails_the_run_naming_the_step(base, tmp_path, monkeypatch):
    """Planted fault: from step 4 on the engine is sent weights one version older than its schedule's;
    at step 5 that is a realized lag of 3, past interval lag 2's bound."""
    honest = lag_schedule.sampling_version

    def planted(step, lag, mode, seed):
        return max(0, honest(step, lag, mode, seed) - (step >= 4))

    monkeypatch.setattr(engines.tiny.trainer, "sampling_version", planted)
    monkeypatch.setattr(lag_schedule, "sampling_version", planted)  # the snapshots it needs are kept
    with pytest.raises(LagOutOfBound, match="step 5: realized lag 3 leaves the interval bound 1..2 of lag 2"):
        run(config(base, lag=2, steps=8), tmp_path / "run")
    status = json.loads((tmp_path / "run" / "train" / "status.json").read_text())
    assert status["status"] == "failed" and "step 5" in status["message"]


def synchronous_rows(run_config: dict, directory) -> list[str]:
    """The synchronous loop written out by hand: broadcast the current weights, generate, train."""
    trainer = Trainer(RunConfig.check(run_config), RunDir(directory))
    params, rows = trainer.params, []
    for step in range(1, run_config["steps"] + 1):
        trainer.engine.broadcast(trainer.state_copy(), step - 1)
        problems = task.problems("train", params["prompts_per_step"], seed=step_seed(run_config["seed"], step, 0))
        batch = trainer.engine.rollout(step, problems, params["samples_per_step"], params["reward"],
                                       seed=step_seed(run_config["seed"], step, 1))
        row = trainer.train_on(batch)
        trainer.step = step
        rows.append(json.dumps({"step": step, "policy_version": step - 1, "realized_lag": 0, **row}, sort_keys=True))
    return rows


@pytest.mark.parametrize("mode", ["interval", "constant", "bounded", "queue"])
def test_lag_0_is_the_synchronous_loop_bit_for_bit(base, tmp_path, mode):
    """The one difference from a textbook synchronous loop is by design, not of the loop: the
    engine samples in bf16, so mu != pi at lag 0 (d/mean_abs > 0), as SGLang vs Megatron."""
    cfg = config(base, lag=0, mode=mode, steps=5, eval_every=5, recipe="grpo_r3", lag_queue=QUEUE)
    assert run(cfg, tmp_path / "lag0") == "completed"
    rows = untimed_rows(tmp_path / "lag0" / "train" / "metrics.jsonl")
    assert rows == synchronous_rows(cfg, tmp_path / "by_hand")
    assert all(row["d/mean_abs"] > 0 for row in read_jsonl(tmp_path / "lag0" / "train" / "metrics.jsonl"))


def test_a_lag_1_run_is_not_the_synchronous_loop(base, tmp_path):
    """Planted fault for the lag-0 test: the same comparison fails on a run one version behind."""
    cfg = config(base, lag=1, mode="constant", steps=5, eval_every=5, recipe="grpo_r3")
    assert run(cfg, tmp_path / "lag1") == "completed"
    lag1 = [json.loads(row) for row in untimed_rows(tmp_path / "lag1" / "train" / "metrics.jsonl")]
    by_hand = [json.loads(row) for row in synchronous_rows(cfg, tmp_path / "by_hand")]
    assert lag1[0] == by_hand[0]  # step 1: both sampled by the base model
    assert all(a["loss"] != b["loss"] for a, b in zip(lag1[2:], by_hand[2:]))


R2 = {"grpo_r2": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}, "routing_replay": "r2"},
      "grpo_r3_spelled": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}, "routing_replay": "r3"}}


def test_r2_replays_the_trainers_own_routing_and_r3_spelled_r3_is_true(base, tmp_path):
    runs = {}
    for recipe in ("grpo", "grpo_r3", "grpo_r2", "grpo_r3_spelled"):
        cfg = config(base, recipe=recipe, lag=2, steps=6, extra_recipes=R2)
        runs[recipe] = cfg
        assert run(cfg, tmp_path / recipe) == "completed"
    rows = {recipe: read_jsonl(tmp_path / recipe / "train" / "metrics.jsonl") for recipe in runs}
    assert runs["grpo_r3_spelled"]["recipe"]["routing_replay"] is True
    assert [r["loss"] for r in rows["grpo_r3_spelled"]] == [r["loss"] for r in rows["grpo_r3"]]
    # R2: the recompute routes as the trainer chooses (so its mismatch to the engine is the plain
    # run's), and the update replays that routing: a different loss trajectory from both others
    assert all(r["routing/mismatch_rate"] == r["routing/own_mismatch_rate"] for r in rows["grpo_r2"])
    assert rows["grpo_r2"][0]["loss"] == rows["grpo"][0]["loss"]  # the first minibatch: same weights, same routing
    assert [r["loss"] for r in rows["grpo_r2"]] != [r["loss"] for r in rows["grpo"]]
    assert [r["loss"] for r in rows["grpo_r2"]] != [r["loss"] for r in rows["grpo_r3"]]


def test_fp16_rollouts_sample_in_float16(base, tmp_path):
    cfg = config(base, lag=1, steps=3, rollout_dtype="float16")
    trainer = Trainer(RunConfig.check(cfg), RunDir(tmp_path))
    assert next(trainer.engine.model.parameters()).dtype == torch.float16
    assert trainer.run() == "completed"
    fp16 = read_jsonl(tmp_path / "train" / "metrics.jsonl")
    assert run(config(base, lag=1, steps=3), tmp_path / "bf16") == "completed"
    bf16 = read_jsonl(tmp_path / "bf16" / "train" / "metrics.jsonl")
    assert all(a["d/impl_mean_abs"] != b["d/impl_mean_abs"] for a, b in zip(fp16, bf16))


def test_a_float32_sampler_has_no_mismatch_at_lag_0(base, tmp_path):
    """The no-mismatch arm of workflow/presets/sources.yaml: at lag 0 a float32 engine samples from
    the trainer's own distribution (but for the summation order of its KV-cache decode)."""
    assert run(config(base, lag=0, steps=3, eval_every=3, rollout_dtype="float32"), tmp_path / "fp32") == "completed"
    rows = read_jsonl(tmp_path / "fp32" / "train" / "metrics.jsonl")
    assert all(row["d/max"] < 1e-4 and row["routing/mismatch_rate"] == 0 for row in rows)
    assert run(config(base, lag=0, steps=3, eval_every=3), tmp_path / "bf16") == "completed"
    assert all(row["d/max"] > 1e-3 for row in read_jsonl(tmp_path / "bf16" / "train" / "metrics.jsonl"))
