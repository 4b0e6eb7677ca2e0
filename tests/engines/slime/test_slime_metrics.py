"""engines.slime.metrics on one process: realized lag from weight versions, resumed metrics files,
the train-log tap, and clear errors when a hook is missing."""
from __future__ import annotations

import json
import math
from argparse import Namespace

import numpy as np
import pytest
import torch

from engines.mismatch import QUANTILES, abs_d_stats, linear_quantiles
from engines.slime import metrics
from engines.slime.metrics import first_non_finite, overflow_steps
from harness.io import append_jsonl_atomic, read_jsonl
from harness.lag import LagOutOfBound
from tests.support import slime_standin

slime_standin.install()


def run_args(tmp_path, mode="interval", lag=8):
    return Namespace(stalebench_run_dir=str(tmp_path), stalebench_lag_mode=mode, stalebench_lag=lag, stalebench_seed=0)


def test_rollout_records_follow_train_async_interval_schedule(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "_first_rollout_id", None)
    args = run_args(tmp_path, lag=4)
    # train_async, interval 4: push 1 before training; push v >= 2 after rollout 4(v-1) - 1; rollout r + 1
    # is generated while r trains, so it carries the push made before r's training
    pushes = {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 8: 2, 9: 3}
    for rollout_id, push in pushes.items():
        samples = [Namespace(weight_versions=[str(push)]) for _ in range(3)]
        assert metrics.log_rollout(rollout_id, args, samples, None, 0.0) is False
    records = read_jsonl(tmp_path / "train" / "rollouts.jsonl")
    assert [r["realized_lag"] for r in records] == [0, 1, 2, 3, 4, 1, 2, 3, 4, 1]
    assert [r["policy_version"] for r in records] == [0, 0, 0, 0, 0, 4, 4, 4, 4, 8]


def test_mixed_versions_report_the_oldest(tmp_path):
    record = metrics.sampling_version(run_args(tmp_path, mode="constant", lag=2), 7, [["5"], ["6"], ["5", "6"]],
                                      start=0)
    assert (record["policy_version"], record["policy_version_newest"], record["realized_lag"]) == (4, 5, 3)
    with pytest.raises(ValueError, match="weight version"):
        metrics.sampling_version(run_args(tmp_path), 0, [[], []], start=0)


def test_statistics_are_numpys_linear_quantiles():
    values = np.random.default_rng(0).exponential(0.01, size=10_001)
    stats = abs_d_stats(torch.from_numpy(values))
    assert stats["d/p99"] == pytest.approx(float(np.quantile(values, 0.99)))
    assert stats["d/max"] == values.max() and stats["d/mean_abs"] == pytest.approx(values.mean())
    assert all(math.isnan(v) for v in abs_d_stats(torch.zeros(0)).values())


def test_statistics_of_values_whose_quantiles_are_known():
    """0, 1, ..., 1000 shuffled: rank q x 1000 is the value itself, so p50 = 500, p90 = 900, p99 = 990
    (numpy's linear quantiles too), max 1000, mean 500."""
    values = torch.from_numpy(np.random.default_rng(1).permutation(1001).astype(np.float64))
    stats = abs_d_stats(values)
    assert (stats["d/p50"], stats["d/p90"], stats["d/p99"], stats["d/max"], stats["d/mean_abs"]) == \
        (500.0, 900.0, 990.0, 1000.0, 500.0)
    assert np.quantile(values.numpy(), [0.5, 0.9, 0.99]).tolist() == [500.0, 900.0, 990.0]
    # between two values: the 0.5 quantile of 0, 1, 2, 3 is 1.5
    assert abs_d_stats(torch.tensor([3.0, 0.0, 2.0, 1.0]))["d/p50"] == 1.5


@pytest.mark.slow  # 2^24 values sorted
def test_quantiles_are_exact_beyond_torch_quantiles_size_limit():
    """A Table-1 step holds ~20M active tokens; torch.quantile refuses more than 2^24 elements."""
    values = torch.from_numpy(np.random.default_rng(1).exponential(0.01, size=2**24 + 1).astype(np.float32))
    with pytest.raises(RuntimeError, match="too large"):
        torch.quantile(values.double(), torch.tensor(QUANTILES, dtype=torch.float64))
    stats = abs_d_stats(values)
    expected = np.quantile(values.double().numpy(), QUANTILES)
    # numpy interpolates with its own rounding of the same formula: at most one unit in the last place
    np.testing.assert_array_max_ulp(np.array([stats["d/p50"], stats["d/p90"], stats["d/p99"]]), expected, maxulp=1)
    assert stats["d/max"] == float(values.max())


@pytest.mark.parametrize("size", [1, 2, 7, 100, 10_001])
def test_quantiles_below_the_limit_are_torch_quantiles_bit_for_bit(size):
    values = torch.from_numpy(np.random.default_rng(size).exponential(0.01, size=size)).round(decimals=3)  # ties
    assert linear_quantiles(values, QUANTILES) == torch.quantile(values, torch.tensor(QUANTILES, dtype=torch.float64)).tolist()
    with_nan = torch.cat([values, torch.tensor([math.nan], dtype=torch.float64)])
    assert all(math.isnan(v) for v in linear_quantiles(with_nan, QUANTILES))


def test_a_resumed_job_drops_rows_it_will_recompute_and_rows_need_the_train_log(tmp_path, monkeypatch):
    args = run_args(tmp_path)
    path = tmp_path / "train" / "metrics.jsonl"
    append_jsonl_atomic(path, [{"step": s, "loss": 0.0} for s in range(1, 8)])  # killed after step 7
    recorder = metrics.MetricsRecorder(args)
    monkeypatch.setattr(slime_standin.sys.modules["slime.observability.logging_utils"], "log", slime_standin.log)
    metrics.tap_slime_train_log(recorder)
    metrics.tap_slime_train_log(recorder)  # installed once
    import slime.observability.logging_utils as logging_utils
    assert logging_utils.log.stalebench_tap and logging_utils.log is not slime_standin.log

    recorder.begin_step(5, {"step": 6, "realized_lag": 6})  # the job resumed at rollout 5 (step 6)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4, 5]
    logging_utils.log(args, {"rollout/step": 5, "rollout/reward": 1.0}, "rollout/step")  # not a train log
    assert len(read_jsonl(path)) == 5
    before = len(slime_standin.LOGGED)
    logging_utils.log(args, {"train/step": 5, "train/loss": 0.25, "train/grad_norm": 3.0,
                             "train/entropy_loss": 0.5, "train/clip/frac_upper": 0.01}, "train/step")
    assert len(slime_standin.LOGGED) == before + 1  # slime's own logging still happens
    row = read_jsonl(path)[-1]
    assert row == {"step": 6, "realized_lag": 6, "loss": 0.25, "grad_norm": 3.0, "entropy": 0.5,
                   "entropy_loss": 0.5, "clip/frac_upper": 0.01}
    assert json.loads(path.read_text().splitlines()[-1]) == row


def test_missing_hooks_are_named(tmp_path):
    with pytest.raises(ValueError, match="custom-rollout-log-function-path"):
        metrics.rollout_record(run_args(tmp_path), 3)
    with pytest.raises(ValueError, match="stalebench_run_dir"):
        metrics.run_of(Namespace())


def test_rollout_log_probs_as_old_is_refused_before_the_step_is_measured(tmp_path):
    """With --use-rollout-logprobs slime never recomputes: no stage has log_probs, and the hook would
    silently write no row."""
    args = slime_standin.slime_args(use_rollout_logprobs=True, **vars(run_args(tmp_path)))
    with pytest.raises(ValueError, match="--use-rollout-logprobs"):
        metrics.postprocess(args, 0, {"rollout_log_probs": [torch.zeros(3)], "loss_masks": [torch.ones(3)]})
    assert not (tmp_path / "train" / "metrics.jsonl").exists()


def test_a_rollout_past_its_lag_bound_fails_the_step(tmp_path, monkeypatch):
    """Planted fault: at interval lag 4, rollout 6 sampled by push 1 (version 0: realized lag 6)."""
    monkeypatch.setattr(metrics, "_first_rollout_id", None)
    args = run_args(tmp_path, lag=4)
    for rollout_id, push in enumerate([1, 1, 1, 1, 1, 2, 1]):
        metrics.log_rollout(rollout_id, args, [Namespace(weight_versions=[str(push)])], None, 0.0)
    assert [metrics.checked_rollout_record(args, r)["realized_lag"] for r in range(6)] == [0, 1, 2, 3, 4, 1]
    with pytest.raises(LagOutOfBound, match=r"step 7: realized lag 6 leaves the interval bound 1\.\.4 of lag 4"):
        metrics.checked_rollout_record(args, 6)


def test_a_resumed_jobs_bound_counts_from_its_start(tmp_path, monkeypatch):
    """Constant lag 3 resumed at rollout 5: its first rollouts are younger than 3 (the fresh warm-up)."""
    monkeypatch.setattr(metrics, "_first_rollout_id", None)
    args = run_args(tmp_path, mode="constant", lag=3)
    for rollout_id, push in zip(range(5, 11), [1, 1, 1, 1, 2, 3]):
        metrics.log_rollout(rollout_id, args, [Namespace(weight_versions=[str(push)])], None, 0.0)
    assert [metrics.checked_rollout_record(args, r)["realized_lag"] for r in range(5, 11)] == [0, 1, 2, 3, 3, 3]


def test_fp16_reads_an_overflowed_grad_norm_as_a_skipped_step_and_only_a_non_finite_loss_as_divergence():
    nan = float("nan")
    rows = [{"step": 1, "loss": 0.1, "grad_norm": nan}, {"step": 2, "loss": 0.1, "grad_norm": 1.0},
            {"step": 3, "loss": 0.1, "grad_norm": float("inf")}, {"step": 4, "loss": nan, "grad_norm": nan}]
    assert first_non_finite(rows)["step"] == 1  # bf16: the first non-finite grad norm is divergence
    assert first_non_finite(rows, fp16=True)["step"] == 4
    assert first_non_finite(rows[:3], fp16=True) is None
    assert overflow_steps(rows) == [1, 3]
