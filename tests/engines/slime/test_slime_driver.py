"""The lag driver (every mode) against fake slime Ray actors, and the weight-version -> trainer-version map."""
from __future__ import annotations

from argparse import Namespace

import pytest

from engines.slime import plan
from engines.slime.driver import check_args, finish, lag_loop, stop_check
from engines.slime.weight_versions import driver_version, trainer_version
from grid.config import load
from grid.jobs import rule_resources, warning_lead_seconds
from grid.settings import Config
from harness.lag import LAG_MODES, sampling_version
from harness.run import RunDir
from tests.support.paths import ROOT
from tests.support.slime_cluster import FakeCluster, TimedCluster, periodic

# the modes slime realizes: queue (a lag per group) is the tiny engine's only (engines/slime/job_script.py)
SLIME_MODES = tuple(mode for mode in LAG_MODES if mode != "queue")


def run(lag, mode="constant", steps=20, start=0, save_interval=5, seed=0, stop_after=None, global_dataset=False):
    cluster = FakeCluster()
    cluster.trainer_version = start
    args = Namespace(start_rollout_id=start, num_rollout=steps, save_interval=save_interval,
                     rollout_global_dataset=global_dataset)
    cluster.stopped = lag_loop(
        args, cluster, cluster, mode=mode, lag=lag, seed=seed, num_rollout_per_epoch=None, get=cluster.get,
        periodic=periodic, stop_requested=lambda: stop_after is not None and cluster.trainer_version > stop_after)
    return cluster


@pytest.mark.parametrize("mode", SLIME_MODES)
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


@pytest.mark.parametrize("mode", SLIME_MODES)
@pytest.mark.parametrize("lag", [1, 3, 8])
def test_the_time_limit_warning_saves_and_stops_in_every_mode(mode, lag):
    """After the warning the driver makes one call, the Megatron save of the step it trained, without
    slime's HF copy (step 7 is off the evaluation cadence): it waits for no generation (those in flight
    are regenerated on resume) and queues no data-source save behind them; that rollout's data-source
    state was written right after its generation."""
    cluster = run(lag, mode=mode, stop_after=6, global_dataset=True)
    assert cluster.stopped == 6
    assert [r for r, _, _ in cluster.trained] == list(range(7)) and cluster.saved == [4, 6]
    after_the_warning = cluster.log[cluster.log.index(("train", 6)) + 1:]
    assert after_the_warning == [("megatron_save", 6)]
    assert ("hf_save", 4) in cluster.log  # a periodic save keeps its HF copy
    actor_calls = [call for call in cluster.log if call[0] in ("generate", "data_source_save")]
    for r in range(7):  # each the actor's next call after its generation, before any later generation
        assert actor_calls[actor_calls.index(("generate", r)) + 1] == ("data_source_save", r)


def test_a_stop_on_a_periodic_step_saves_once_with_its_hf_copy():
    cluster = run(1, mode="interval", stop_after=4)
    assert cluster.stopped == 4 and cluster.saved == [4]
    assert cluster.log[cluster.log.index(("train", 4)) + 1:] == [("megatron_save", 4), ("hf_save", 4)]


@pytest.mark.parametrize("mode", SLIME_MODES)
def test_a_non_finite_step_ends_the_loop_there_without_a_save(mode):
    """Step 7 (rollout 6) logs a NaN grad norm: nothing trains, saves or is pushed after it."""
    cluster = FakeCluster()
    rows = {}
    train = cluster.async_train

    def async_train(rollout_id, data):  # the trainer's writer rank appends the step's row
        rows[rollout_id] = float("nan") if rollout_id == 6 else 1.0
        return train(rollout_id, data)

    cluster.async_train = async_train
    args = Namespace(start_rollout_id=0, num_rollout=20, save_interval=5, rollout_global_dataset=True)
    assert lag_loop(args, cluster, cluster, mode=mode, lag=3, seed=0, num_rollout_per_epoch=None, get=cluster.get,
                    periodic=periodic, diverged=lambda r: rows[r] != rows[r]) is None
    assert [r for r, _, _ in cluster.trained] == list(range(7)) and cluster.saved == [4]
    assert cluster.log[cluster.log.index(("train", 6)) + 1:] == []


@pytest.mark.parametrize("fp16", [False, True])
def test_a_diverged_job_ends_at_once_without_waiting_for_its_generations_in_flight(tmp_path, fp16):
    """Interval lag 8 on the clock: rollout 9 (step 10), the first of the 8 generated after the push at
    step 9, is non-finite while the other 7 are queued on the rollout manager. The job ends at that step's
    training: no generation
    is waited for, and no dispose queues behind them (the job script's ray stop ends them), where a
    completed job's dispose runs after its last generation. fp16: a NaN grad norm with a finite loss is a
    skipped step, so only a NaN loss ends it."""
    cluster = TimedCluster(generate=30, train=10, push=1, megatron=5, hf=1)
    run = RunDir(tmp_path / "run")

    def async_train(rollout_id, data, train=cluster.async_train):  # the writer rank appends the step's row
        bad = float("nan") if rollout_id == 9 else 1.0
        run.append_metrics([{"step": rollout_id + 1, "loss": bad if fp16 else -0.1, "grad_norm": bad}])
        return train(rollout_id, data)

    cluster.async_train = async_train
    args = Namespace(start_rollout_id=0, num_rollout=40, save_interval=16, rollout_global_dataset=False)
    stopped = lag_loop(args, cluster, cluster, mode="interval", lag=8, seed=0, num_rollout_per_epoch=None,
                       get=cluster.get, periodic=periodic, ready=cluster.ready,
                       diverged=lambda r: finish_check(run, fp16))
    ended = cluster.clock
    assert finish(stopped, run, cluster, cluster.get, fp16=fp16) == "diverged"
    assert cluster.log[-1] == ("train", 9) and cluster.clock == ended  # nothing ran or was waited for after it
    assert sum(ref.kind == "generation" for ref in cluster.queue) == 7  # rollouts 10-16, left to ray stop
    assert ("dispose", -1) not in cluster.log
    done = run_to_the_end(tmp_path)
    assert done.log[-1] == ("dispose", -1)


def finish_check(run: RunDir, fp16: bool) -> bool:
    from engines.slime.metrics import first_non_finite
    return first_non_finite(run.read_metrics(), fp16=fp16) is not None


def run_to_the_end(tmp_path):
    cluster = FakeCluster()
    args = Namespace(start_rollout_id=0, num_rollout=6, save_interval=3, rollout_global_dataset=False)
    stopped = lag_loop(args, cluster, cluster, mode="interval", lag=2, seed=0, num_rollout_per_epoch=None,
                       get=cluster.get, periodic=periodic)
    assert finish(stopped, RunDir(tmp_path / "completed"), cluster, cluster.get, fp16=False) == "completed"
    return cluster


def _stop(cluster, lag, mode="interval", steps=544, save_interval=16):
    args = Namespace(start_rollout_id=0, num_rollout=steps, save_interval=save_interval, rollout_global_dataset=True)
    return lag_loop(args, cluster, cluster, mode=mode, lag=lag, seed=0, num_rollout_per_epoch=None, get=cluster.get,
                    periodic=periodic, stop_requested=cluster.stop_requested, ready=cluster.ready)


def test_a_warning_during_a_generation_is_acted_on_before_it_ends():
    """Interval lag 8 generates 8 rollouts one after another after each push: the trainer waits for
    each. A warning in that wait stops the job within one poll, not after the generation and a step."""
    cluster = TimedCluster(generate=30, train=10, push=1, megatron=5, hf=1, warning=110)
    # rollouts 0, 1, 2 trained by minute 1 + 90 + 10; rollout 3's generation would end at minute 121
    assert _stop(cluster, lag=8) == 2
    assert cluster.save_ends == [pytest.approx(115, abs=0.2)]  # a poll + a Megatron save, no HF copy
    assert ("hf_save", 2) not in cluster.log


def test_the_clock_stops_the_driver_as_the_warning_does_and_the_mark_still_does(tmp_path):
    """stop_check: the job's stop time on the clock (no signal anywhere) acts as the warning at minute 110
    did above; with no stop time, the trap's mark stops the driver."""
    cluster = TimedCluster(generate=30, train=10, push=1, megatron=5, hf=1)  # no warning signal
    mark = tmp_path / "stop_requested"
    cluster.stop_requested = stop_check(mark, stop_at=110.0, clock=lambda: cluster.clock)
    assert _stop(cluster, lag=8) == 2
    assert cluster.save_ends == [pytest.approx(115, abs=0.2)] and not mark.exists()
    cluster = TimedCluster(generate=30, train=10, push=1, megatron=5, hf=1)
    cluster.stop_requested = stop_check(mark, stop_at=None, clock=lambda: cluster.clock)
    assert _stop(cluster, lag=8, steps=20) is None  # neither trigger: the run ends
    mark.touch()
    assert stop_check(mark, stop_at=None)() and not stop_check(tmp_path / "none", stop_at=None)()


def test_every_stop_save_finishes_before_the_kill_under_the_presets_timings():
    """The driver on a clock with the Table-1 preset's timings at their slow end (engines.slime.plan:
    a generation and a training call each a whole step, a push 1 min (an assumption of this test),
    a periodic save (Megatron + HF) and a stop's (Megatron) at the published write speed, a save every
    eval_every steps), the warning at every 5 minutes of the first 40 steps: every stop's save ends
    before the kill at the preset's warning lead. Under the old 15-min lead most do not."""
    table1 = load(ROOT / "workflow" / "presets" / "table1.yaml")
    times = plan.timings(Config.build(table1))
    budget = plan.stop(Config.build(table1), times)
    lead = warning_lead_seconds(rule_resources(table1, "train")) / 60
    assert lead * 60 == budget["lead_seconds"]  # the preset's lead is the plan's budget
    step, megatron, full = times["step"][1], budget["megatron_save"][1], budget["save"][1]
    spare = {}
    for lag in table1["lags"]:
        for warning in range(5, int(40 * step), 5):
            cluster = TimedCluster(generate=step, train=step, push=1, megatron=megatron, hf=full - megatron,
                                   warning=warning)
            stopped = _stop(cluster, lag, save_interval=table1["eval_every"])
            assert stopped is not None and cluster.stop_requested()
            end = max([warning, *cluster.save_ends])  # the stop's own save, or a periodic one it waited for
            spare[lag, warning] = warning + lead - end
            assert stopped == -1 or (("hf_save", stopped) in cluster.log) == ((stopped + 1) % table1["eval_every"] == 0)
    assert min(spare.values()) >= 0, min(spare.items(), key=lambda item: item[1])
    assert sum(lead - s > 15 for s in spare.values()) > len(spare) / 2  # the old 15-min lead: killed mid-save


@pytest.mark.parametrize("mode", SLIME_MODES)
def test_each_data_source_save_runs_right_after_its_generation(mode):
    """So each rollout's saved state is the data source's position after that rollout's prompts."""
    cluster = run(3, mode=mode, global_dataset=True)
    actor_calls = [call for call in cluster.log if call[0] in ("generate", "data_source_save")]
    assert actor_calls == [call for r in range(20) for call in (("generate", r), ("data_source_save", r))]
    assert cluster.stopped is None


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
