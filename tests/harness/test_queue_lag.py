"""Lag mode queue (harness.queue_lag, engines/tiny/queue_rollout.py): the model's numbers by hand,
a run whose realized per-group lags follow the model's distribution (a chi-square goodness-of-fit
test) and grow with the groups' lengths, a planted engine fault that fails that test, and the
bound check (its resume after a stop: tests/engines/tiny/test_tiny_lag.py)."""
import math

import pytest
from scipy import stats

import engines.tiny.queue_rollout
from engines.train import run
from grid.config import ConfigError, load
from harness.io import read_jsonl
from harness.lag import LagOutOfBound, group_lags, newest_sampling_version, sampling_version
from harness.queue_lag import QueueModel, group_draws
from tests.support.tiny_runs import config

QUEUE = {"utilization": 1.5, "concurrency": 4, "capacity": 4, "length_sigma": 1.0}  # SMALL: 4 groups per step
LAG, STEPS = 6, 60


def model(**fields) -> QueueModel:
    return QueueModel(**{"batch": 4, "max_lag": LAG, **QUEUE, **fields})


def test_the_models_numbers_by_hand():
    # M/M/1/K: at load 1 the K + 1 states are equally likely (mean K / 2); at load 2, K = 2: 1, 2, 4 -> 10 / 7
    assert model(utilization=1.0, capacity=6).queued() == 3.0
    assert model(utilization=2.0, capacity=2).queued() == pytest.approx(10 / 7)
    # D(X) = C / B (X / r + 1 - 1 / r) + L / B; C = 8, B = 4, rho = 2, K = 2: D(1) = 2 + (10 / 7) / 4
    busy = model(utilization=2.0, capacity=2, concurrency=8)
    assert busy.steps_in_system(1.0) == pytest.approx(2 + 10 / 28)
    assert busy.steps_in_system(3.0) == pytest.approx(2 * (1.5 + 0.5) + 10 / 28)  # longer: staler
    # without the filter the mean lag is E[D] = C / B + L / B (E[floor(D + U)] = D for a uniform U)
    wide = model(max_lag=60)
    assert sum(k * p for k, p in enumerate(wide.pmf())) == pytest.approx(1 + wide.queued() / 4, abs=2e-3)
    assert sum(model().pmf()) == pytest.approx(1.0) and 0 < model().drop_rate() < 0.05
    draws = group_draws(model(), 30, 7)
    assert len(draws) == 4 and all(0 <= lag <= LAG for lag, _ in draws) and draws != group_draws(model(), 30, 8)
    assert [lag for lag, _ in group_draws(model(), 2, 7)] == [min(lag, 1) for lag, _ in group_draws(model(), 2, 7)]


def test_a_batch_is_versioned_by_its_stalest_and_its_freshest_group():
    lags = group_lags(30, LAG, 7, model())
    assert sampling_version(30, LAG, "queue", 7, model()) == 29 - max(lags)
    assert newest_sampling_version(30, LAG, "queue", 7, model()) == 29 - min(lags)
    with pytest.raises(ValueError, match="lag_mode 'queue' needs its queue model"):
        sampling_version(30, LAG, "queue", 7)


def expected_counts(queue: QueueModel, steps: int) -> list[float]:
    """The model's expected count of each lag over a run's groups, with step s's lags capped at s - 1."""
    pmf, counts = queue.pmf(), [0.0] * (queue.max_lag + 1)
    for step in range(1, steps + 1):
        for k, p in enumerate(pmf):
            counts[min(k, step - 1)] += p * queue.batch
    return counts


def goodness_of_fit(observed: list[int], queue: QueueModel, steps: int):
    """scipy's chi-square test of the observed lags against the model, the sparse tail pooled so that
    every bin expects at least 5."""
    expected = expected_counts(queue, steps)
    counts = [observed.count(k) for k in range(len(expected))]
    while len(expected) > 2 and expected[-1] < 5:
        expected[-2:] = [sum(expected[-2:])]
        counts[-2:] = [sum(counts[-2:])]
    return stats.chisquare(counts, expected)


def queue_run(base, directory, seed=0):
    assert run(config(base, lag=LAG, mode="queue", steps=STEPS, eval_every=30, seed=seed, lag_queue=QUEUE),
               directory) == "completed"
    return read_jsonl(directory / "train" / "metrics.jsonl")


def test_a_queue_lag_run_realizes_the_models_distribution(base, tmp_path):
    rows = queue_run(base, tmp_path / "grid" / "runs" / "grpo" / f"lag{LAG}" / "seed0")
    lags = [lag for row in rows for lag in row["queue/lags"]]
    lengths = [length for row in rows for length in row["queue/lengths"]]
    # the engine sampled every group by the version its lag names, and its batch by the stalest
    assert [row["queue/lags"] for row in rows] == [group_lags(s, LAG, 0, model()) for s in range(1, STEPS + 1)]
    assert [row["realized_lag"] for row in rows] == [max(row["queue/lags"]) for row in rows]
    fit = goodness_of_fit(lags, model(), STEPS)
    assert fit.pvalue > 0.01, fit
    spearman = stats.spearmanr(lengths, lags)
    assert spearman.statistic > 0.3 and spearman.pvalue < 1e-6  # long responses are staler


def test_an_engine_that_samples_a_batch_by_its_stalest_group_fails_the_fit(base, tmp_path, monkeypatch):
    """Planted fault: every group of a batch sampled by the batch's oldest version (one weight copy,
    never re-broadcast within a batch): each step's lags all equal its largest, and the test rejects."""
    honest = engines.tiny.queue_rollout.group_lags
    monkeypatch.setattr(engines.tiny.queue_rollout, "group_lags",
                        lambda *args: [max(honest(*args))] * len(honest(*args)))
    rows = queue_run(base, tmp_path / "grid" / "runs" / "grpo" / f"lag{LAG}" / "seed0")
    assert goodness_of_fit([lag for row in rows for lag in row["queue/lags"]], model(), STEPS).pvalue < 1e-4


def test_a_group_past_the_bound_fails_the_run_naming_the_step(base, tmp_path, monkeypatch):
    monkeypatch.setattr(engines.tiny.queue_rollout, "group_lags",
                        lambda step, lag, seed, queue: [min(step - 1, lag + 1)] * queue.batch)
    with pytest.raises(LagOutOfBound, match=f"step {LAG + 2}: realized lag {LAG + 1} leaves the queue bound"):
        queue_run(base, tmp_path / "grid" / "runs" / "grpo" / f"lag{LAG}" / "seed0")


def test_the_queue_settings_are_checked_naming_the_key():
    checked = load("config.yaml", {"lag_mode": "queue"})
    assert checked["lag_queue"] == {"utilization": 1.5, "concurrency": 16, "capacity": 16, "length_sigma": 1.0}
    with pytest.raises(ConfigError, match=r"config key 'lag_queue.capacity': 0 is less than the minimum of 1"):
        load("config.yaml", {"lag_mode": "queue", "lag_queue": {"capacity": 0}})
    assert math.isfinite(QueueModel(batch=16, max_lag=8, **checked["lag_queue"]).queued())
