"""The constant-lag driver against fake slime Ray actors, and the weight-version -> trainer-version map."""
from __future__ import annotations

from argparse import Namespace

import pytest

from engines.slime.driver import check_args, constant_lag_loop
from engines.slime.lag import constant_lag_version, trainer_version


class FakeRef:
    def __init__(self, run):
        self.run, self.done, self.value = run, False, None


class FakeCluster:
    """slime's RolloutManager actor + RayTrainGroup, with Ray's ordering: an actor runs its calls one at
    a time in submission order, and a generation samples with whatever weights the engine holds
    when it RUNS (here: lazily, when it or a later call is waited on)."""

    def __init__(self):
        self.trainer_version = 0     # optimizer steps taken
        self.engine_version = None   # trainer version held by the SGLang engines
        self.pushes = 0              # slime's weight_version counter
        self.queue: list[FakeRef] = []
        self.trained: list[tuple[int, int, int]] = []  # (rollout id, sampling trainer version, its push)
        self.push_after: list[int] = []                 # rollouts trained before each push
        self.saved: list[int] = []
        self.generate = Namespace(remote=self._generate)
        self.save = Namespace(remote=lambda rollout_id: FakeRef(lambda: None))

    # --- RolloutManager.generate.remote(rollout_id) ---
    def _generate(self, rollout_id):
        ref = FakeRef(lambda: {"rollout_id": rollout_id, "version": self.engine_version,
                               "weight_version": self.pushes})
        self.queue.append(ref)
        return ref

    def get(self, ref):
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        while not ref.done:  # the actor runs its queue in order
            head = self.queue.pop(0) if ref in self.queue else ref
            head.value, head.done = head.run(), True
        return ref.value

    # --- RayTrainGroup ---
    def async_train(self, rollout_id, data):
        assert data["rollout_id"] == rollout_id
        self.trained.append((rollout_id, data["version"], data["weight_version"]))
        self.trainer_version += 1
        return [FakeRef(lambda: None)]

    def update_weights(self):
        assert not self.queue, "weights pushed while a generation is in flight"
        self.engine_version, self.pushes = self.trainer_version, self.pushes + 1
        self.push_after.append(len(self.trained))

    def save_model(self, rollout_id, force_sync=False):
        self.saved.append(rollout_id)


def periodic(rollout_id, interval, num_rollout_per_epoch=None, num_rollout=None):
    """slime's should_run_periodic_action (the last rollout always; every interval-th)."""
    if interval is None:
        return False
    if num_rollout is not None and rollout_id == num_rollout - 1:
        return True
    return (rollout_id + 1) % interval == 0


def run(lag, steps=20, start=0, save_interval=5):
    cluster = FakeCluster()
    cluster.trainer_version = start
    args = Namespace(start_rollout_id=start, num_rollout=steps, save_interval=save_interval,
                     rollout_global_dataset=False)
    constant_lag_loop(args, cluster, cluster, lag=lag, num_rollout_per_epoch=None, get=cluster.get,
                      periodic=periodic)
    return cluster


@pytest.mark.parametrize("lag", [1, 2, 3, 8])
def test_batch_trained_at_step_k_was_sampled_by_version_k_minus_lag(lag):
    cluster = run(lag)
    assert [r for r, _, _ in cluster.trained] == list(range(20))
    for rollout_id, version, push in cluster.trained:
        assert version == max(0, rollout_id - lag)  # warm-up: the first batches come from version 0
        assert version == constant_lag_version(rollout_id, lag=lag, start=0)
        # the metrics hook recovers the version from slime's weight_version alone
        assert trainer_version(push, mode="constant", lag=lag, start=0) == version
    realized = [rollout_id - version for rollout_id, version, _ in cluster.trained]
    assert realized[lag:] == [lag] * (20 - lag)


@pytest.mark.parametrize("lag", [1, 3])
def test_weights_reach_the_engine_after_every_step_a_later_batch_needs(lag):
    cluster = run(lag)
    # first push before any training; then after step j while rollout j + lag + 1 is still to come
    assert cluster.push_after == [0] + [j + 1 for j in range(20) if j + lag + 1 < 20]
    assert cluster.saved == [4, 9, 14, 19]


def test_a_resumed_job_warms_up_from_its_own_start():
    cluster = run(lag=3, steps=12, start=5)
    assert [(r, v) for r, v, _ in cluster.trained] == [(5, 5), (6, 5), (7, 5), (8, 5), (9, 6), (10, 7), (11, 8)]
    for _rollout_id, version, push in cluster.trained:
        assert trainer_version(push, mode="constant", lag=3, start=5) == version


def test_interval_mode_map_matches_train_async_schedule():
    """train_async.py: push at start, then after rollout r when (r + 1) % n == 0; rollout r + 1 is
    generated during the training of r, with the weights held then."""
    for n, start in ((1, 0), (8, 0), (8, 5), (3, 9)):
        engine, pushes, lags = start, 1, []
        versions = {start: (start, pushes)}  # rollout id -> (sampling version, push count)
        trainer = start
        for r in range(start, start + 30):
            versions[r + 1] = (engine, pushes)
            version, push = versions[r]
            assert trainer_version(push, mode="interval", lag=n, start=start) == version
            lags.append(r - version)
            trainer += 1
            if (r + 1) % n == 0:
                engine, pushes = trainer, pushes + 1
                # train_async waits for the generation in flight, then regenerates nothing: the
                # already generated rollout r + 1 keeps its (older) weights
        if start % n == 0:
            assert lags[n + 1:2 * n + 1] == list(range(1, n + 1))  # cycles 1..n after warm-up (n = 1: lag 1)


def test_bad_lag_and_unsupported_slime_modes_are_refused():
    with pytest.raises(ValueError, match="integer >= 1"):
        run(lag=0)
    with pytest.raises(ValueError, match="stalebench_lag_mode"):
        check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="interval"))
    with pytest.raises(ValueError, match="--colocate"):
        check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="constant", colocate=True))
    with pytest.raises(ValueError, match="first push"):
        trainer_version(0, mode="interval", lag=2, start=0)


def test_time_limit_warning_saves_after_the_current_step_and_stops():
    cluster = FakeCluster()
    args = Namespace(start_rollout_id=0, num_rollout=20, save_interval=5, rollout_global_dataset=False)
    constant_lag_loop(args, cluster, cluster, lag=2, num_rollout_per_epoch=None, get=cluster.get,
                      periodic=periodic, stop_requested=lambda: len(cluster.trained) >= 8)
    assert [r for r, _, _ in cluster.trained] == list(range(8))  # stopped after the step it was training
    assert cluster.saved == [4, 7]  # the periodic save, then one at the stop, for the retry to resume from
    assert not cluster.queue  # no generation left running


def test_a_warning_at_the_last_step_is_a_normal_end():
    cluster = FakeCluster()
    args = Namespace(start_rollout_id=0, num_rollout=6, save_interval=5, rollout_global_dataset=False)
    constant_lag_loop(args, cluster, cluster, lag=1, num_rollout_per_epoch=None, get=cluster.get,
                      periodic=periodic, stop_requested=lambda: len(cluster.trained) >= 6)
    assert len(cluster.trained) == 6 and cluster.saved == [4, 5]
