"""Constant-lag training over slime's Ray actors: ``python3 -m engines.slime.driver <slime flags>``.

slime's train_async.py overlaps one generation with one training step and pushes weights every
``--update-weights-interval`` steps, so the realized lag cycles 1..n. A constant lag n (every
batch sampled by the policy exactly n versions old) needs a different order of the same calls,
which this driver makes; slime's own code does all the work:

    push weights (version start)
    generate rollouts start .. start + n            (sampled by version start: the warm-up)
    for each rollout r:
        train on r                                   -> trainer version r + 1
        save every --save-interval steps, and stop after a save once the time-limit warning came
        wait for the generations in flight, push weights (version r + 1),
        generate rollout r + n + 1                  (sampled by version r + 1 = (r + n + 1) - n)

Weights are never pushed while a generation runs (as in train_async.py), and only while a later
rollout still needs them. With n = 1 this is train_async.py with interval 1. The lag n and the
run directory come from the custom-config YAML (``args.stalebench_lag``). A resumed job starts
with a fresh warm-up: old weights are not kept, so its first n rollouts are sampled by the
resumed version (engines.slime.lag.constant_lag_version).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from engines.slime.job_script import STOP_FILE


def constant_lag_loop(args, rollout_manager, actor_model, *, lag: int, num_rollout_per_epoch: int | None,
                      get: Callable, periodic: Callable, stop_requested: Callable[[], bool] = lambda: False) -> None:
    """Train rollouts ``args.start_rollout_id .. args.num_rollout - 1`` at constant lag ``lag``.

    ``rollout_manager`` is slime's RolloutManager actor handle (``generate.remote``, ``save.remote``);
    ``actor_model`` slime's RayTrainGroup (``async_train``, ``update_weights``, ``save_model``);
    ``get`` is ``ray.get``; ``periodic`` is slime's ``should_run_periodic_action``; ``stop_requested``
    (the time-limit warning came) ends the loop after the current step, with a save."""
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"constant lag must be an integer >= 1, got {lag!r}")
    start, end = args.start_rollout_id, args.num_rollout
    actor_model.update_weights()
    in_flight = {r: rollout_manager.generate.remote(r) for r in range(start, min(start + lag + 1, end))}
    generated = {}
    for rollout_id in range(start, end):
        data = generated.pop(rollout_id) if rollout_id in generated else get(in_flight.pop(rollout_id))
        get(actor_model.async_train(rollout_id, data))
        stop = stop_requested() and rollout_id < end - 1
        if stop or periodic(rollout_id, args.save_interval, num_rollout_per_epoch, end):
            actor_model.save_model(rollout_id, force_sync=stop or rollout_id == end - 1)
            if args.rollout_global_dataset:
                get(rollout_manager.save.remote(rollout_id))
        if stop:
            get(list(in_flight.values()))  # nothing left running in the rollout engines
            return
        following = rollout_id + lag + 1
        if following < end:
            # finish every generation in flight first: a push must not land in the middle of one
            generated.update({r: get(ref) for r, ref in in_flight.items()})
            in_flight.clear()
            actor_model.update_weights()
            in_flight[following] = rollout_manager.generate.remote(following)


def check_args(args) -> int:
    """The lag from the custom config, and the slime settings this driver does not support."""
    lag = getattr(args, "stalebench_lag", None)
    if getattr(args, "stalebench_lag_mode", None) != "constant":
        raise ValueError("engines.slime.driver runs constant-lag jobs: the custom config must set "
                         f"stalebench_lag_mode: constant (got {getattr(args, 'stalebench_lag_mode', None)!r})")
    for flag, attribute in (("--colocate", "colocate"), ("--use-critic", "use_critic"),
                            ("--release-train", "release_train")):
        if getattr(args, attribute, False):
            raise ValueError(f"engines.slime.driver does not support {flag}")
    return lag


def main() -> None:
    import ray
    from slime.observability.logging_utils import configure_logger, finish_tracking, init_tracking
    from slime.ray.placement_group import create_placement_groups, create_rollout_manager, create_training_models
    from slime.utils.arguments import parse_args
    from slime.utils.misc import should_run_periodic_action

    args = parse_args()
    lag = check_args(args)
    configure_logger()
    placement_groups = create_placement_groups(args)
    init_tracking(args)
    rollout_manager, num_rollout_per_epoch = create_rollout_manager(args, placement_groups["rollout"])
    actor_model, _ = create_training_models(args, placement_groups, rollout_manager)
    stop_file = Path(args.stalebench_run_dir) / "train" / STOP_FILE  # touched by the job script (launch)
    constant_lag_loop(args, rollout_manager, actor_model, lag=lag, num_rollout_per_epoch=num_rollout_per_epoch,
                      get=ray.get, periodic=should_run_periodic_action, stop_requested=stop_file.exists)
    ray.get(rollout_manager.dispose.remote())
    finish_tracking(args)


if __name__ == "__main__":
    main()
