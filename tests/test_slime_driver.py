"""The lag driver (every mode) against fake slime Ray actors, and the weight-version -> trainer-version map."""
from __future__ import annotations

from argparse import Namespace

import pytest

from engines.slime.driver import check_args, lag_loop
from engines.slime.lag import driver_version, trainer_version
from harness.lag import LAG_MODES, sampling_version


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


def run(lag, mode="constant", steps=20, start=0, save_interval=5, seed=0, stop_after=None):
    cluster = FakeCluster()
    cluster.trainer_version = start
    args = Namespace(start_rollout_id=start, num_rollout=steps, save_interval=save_interval,
                     rollout_global_dataset=False)
    lag_loop(args, cluster, cluster, mode=mode, lag=lag, seed=seed, num_rollout_per_epoch=None, get=cluster.get,
             periodic=periodic, stop_requested=lambda: stop_after is not None and cluster.trainer_version > stop_after)
    return cluster


@pytest.mark.parametrize("mode", LAG_MODES)
@pytest.mark.parametrize("lag", [0, 1, 3, 8])
def test_every_mode_realizes_the_tiny_engines_schedule(mode, lag):
    """The realized-lag sequence of a driver run is the tiny engine's for the same mode, lag, seed
    and steps (harness.lag.sampling_version, which the tiny trainer reads), and the metrics hook
    recovers each version from slime's weight_version alone."""
    for seed in (0, 3) if mode == "bounded" else (0,):
        cluster = run(lag, mode=mode, seed=seed)
        assert [r for r, _, _ in cluster.trained] == list(range(20))
        tiny = [step - 1 - sampling_version(step, lag, mode, seed) for step in range(1, 21)]
        assert [rollout_id - version for rollout_id, version, _ in cluster.trained] == tiny
        for _rollout_id, version, push in cluster.trained:
            assert trainer_version(push, mode=mode, lag=lag, seed=seed, start=0) == version
        assert max(tiny) == lag if mode != "bounded" else 0 <= min(tiny) <= max(tiny) <= lag


@pytest.mark.parametrize("lag", [1, 3])
def test_weights_reach_the_engine_after_every_step_a_later_batch_needs(lag):
    cluster = run(lag)
    # first push before any training; then after step j while rollout j + lag + 1 is still to come
    assert cluster.push_after == [0] + [j + 1 for j in range(20) if j + lag + 1 < 20]
    assert cluster.saved == [4, 9, 14, 19]
    interval = run(4, mode="interval")  # a push after every 4th step, the version's 4 rollouts generated together
    assert interval.push_after == [0, 4, 8, 12, 16]


def test_a_resumed_job_warms_up_from_its_own_start():
    cluster = run(lag=3, steps=12, start=5)
    assert [(r, v) for r, v, _ in cluster.trained] == [(5, 5), (6, 5), (7, 5), (8, 5), (9, 6), (10, 7), (11, 8)]
    for rollout_id, version, push in cluster.trained:
        assert trainer_version(push, mode="constant", lag=3, seed=0, start=5) == version
        assert driver_version(rollout_id, mode="constant", lag=3, seed=0, start=5) == version


@pytest.mark.parametrize("mode", LAG_MODES)
def test_the_time_limit_warning_saves_and_stops_in_every_mode(mode):
    cluster = run(3, mode=mode, stop_after=6)
    assert [r for r, _, _ in cluster.trained] == list(range(7)) and cluster.saved == [4, 6]
    assert not cluster.queue  # nothing left generating


def test_bad_lag_and_unsupported_slime_modes_are_refused():
    with pytest.raises(ValueError, match="integer >= 0"):
        run(lag=-1)
    with pytest.raises(ValueError, match="lag_mode must be one of"):
        check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="random", stalebench_seed=0))
    with pytest.raises(ValueError, match="lacks"):
        check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="interval"))
    with pytest.raises(ValueError, match="--colocate"):
        check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="constant", stalebench_seed=0, colocate=True))
    assert check_args(Namespace(stalebench_lag=2, stalebench_lag_mode="bounded", stalebench_seed=4)) == \
        {"mode": "bounded", "lag": 2, "seed": 4}
    with pytest.raises(ValueError, match="first push"):
        trainer_version(0, mode="interval", lag=2, seed=0, start=0)
