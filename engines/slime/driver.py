"""Every lag mode over slime's Ray actors: ``python3 -m engines.slime.driver <slime flags>``.

The harness's schedule (harness.lag: interval, constant, bounded; lag 0 = the synchronous loop)
says which trainer version samples each rollout (engines.slime.weight_versions.driver_version); this driver
makes slime's calls in the order that realizes it, and slime's own code does all the work:

    push weights (version start)
    generate every rollout the pushed version samples, each followed by its data-source save
    for each rollout r:
        wait for r's generation                      (at the time-limit warning: save r - 1 and stop)
        train on r                                   -> trainer version r + 1
        save Megatron every --save-interval steps    (at the warning: save r and stop)
        if the next rollout to generate is sampled by version r + 1:
            wait for the generations in flight, push weights (version r + 1),
            generate every rollout that version samples

Weights are never pushed while a generation runs, and only when a later rollout needs them. The
versions are those of the tiny engine for the same mode, lag, seed and steps. Interval lag n
generates the n rollouts of a version together after its push, where slime's train_async.py
(no longer used) overlapped one at a time: the same versions, n rollouts held at once. The mode,
lag, seed and run directory come from the custom-config YAML (``args.stalebench_*``).

Resumes lose no prompt. slime's RolloutManager is a plain Ray actor (its calls run one at a time, in
order) and its data source moves on when a rollout is generated, not when it is trained. So the
driver asks for ``save(r)`` right after ``generate(r)``: that save runs before the next generation
and writes the data source's position after rollout r's prompts (rollout/global_dataset_state_dict_r.pt,
slime/rollout/data_source.py), long before r is trained. Every Megatron save of step r therefore has
its data-source state on disk already, and a resume (slime loads the data source at
start_rollout_id - 1, slime/ray/placement_group.py) continues with the prompts of r + 1: the rollouts
generated but not yet trained at a stop are regenerated from the same prompts, by the resumed
version (a resumed job keeps no older weights than its own: driver_version's ``start``, so it trains
younger batches than an uninterrupted run for up to ``lag`` steps).

The canary (engines.slime.canary: ``args.stalebench_canary``) walks what every job of the grid meets,
before the others are submitted: a fresh canary job trains until two pushes after training have
sampled rollouts and a rollout has been sampled at the full lag (canary_end), saves that step as a
periodic save does (Megatron and HF) and stops there as at the time limit (its ``stopped`` mark); the
resumed canary job trains one step from that save, saves it (Megatron and HF) and ends.

Time-limit stops take one Megatron save, as soon as the warning is seen. The warning is the clock
(the custom config's ``stalebench_stop_at``: the job's end time less the stop lead, which
engines.train learned when the job started, harness.engine.watch_time_limit) or the run's
``stop_requested`` mark that the job script's trap sets where SLURM's signal reaches it (not under
proctrack/cgroup, not through Apptainer): stop_check. The driver polls it while it waits for a
generation (every POLL_SECONDS), and checks it
after each training call and each push, so what runs after the warning is at most the training call
or the save in progress, then the stop's save. A stop waits for no generation (the job script's ``ray
stop`` ends those in flight). The stop's save skips slime's HF copy (``megatron_save_only``: a step
off the evaluation cadence is never scored, engines.slime.launch deletes its HF save), unless the
step is a periodic save's, whose HF copy the evaluation needs; a step already saved is not saved
again. Once the save is on disk the driver writes the run's ``stopped`` mark, which tells
engines.slime.launch that the job stopped at the warning and should be resumed; any other early end
is a failure. engines.slime.plan budgets the stop (one training call + a periodic save) against the
warning's lead.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from engines.slime.metrics import first_non_finite
from engines.slime.resume_check import record_optimizer
from engines.slime.weight_versions import driver_version
from harness.io import write_text_atomic
from harness.lag import canary_step, check_lag
from harness.run import RunDir

POLL_SECONDS = 10.0  # how often a wait for a generation looks for the warning


def megatron_save_only(actor, rollout_id: int):
    """(Runs inside each slime trainer actor, through Ray's ``__ray_call__``.) slime's save_model at a stop,
    without its HF copy: ``args.save_hf`` is what makes save_model write one."""
    save_hf, actor.args.save_hf = actor.args.save_hf, None
    try:
        return actor.save_model(rollout_id, force_sync=True)
    finally:
        actor.args.save_hf = save_hf


def stop_check(stop_file: Path, stop_at: float | None, clock: Callable[[], float] = time.time) -> Callable[[], bool]:
    """Whether the time limit is near: the clock has reached ``stop_at`` (None: no clock stop), or the
    job script marked SLURM's warning signal in ``stop_file``."""
    return lambda: (stop_at is not None and clock() >= stop_at) or stop_file.exists()


def canary_end(*, mode: str, lag: int, seed: int, start: int, end: int) -> int:
    """The canary's last rollout: in a fresh job (``start`` 0) the first by which two versions after the first
    push have sampled rollouts (two post-training pushes) and one rollout was sampled ``lag`` steps back
    (harness.lag.canary_step: a fresh job's versions are the schedule's); in a resumed job its first rollout;
    ``end - 1`` if the run is shorter."""
    return min(start, end - 1) if start > 0 else canary_step(lag, mode, seed, end) - 1


def lag_loop(args, rollout_manager, actor_model, *, mode: str, lag: int, seed: int, num_rollout_per_epoch: int | None,
             get: Callable, periodic: Callable, stop_requested: Callable[[], bool] = lambda: False,
             ready: Callable[[object], bool] = lambda ref: True,
             diverged: Callable[[int], bool] = lambda rollout_id: False, canary: bool = False) -> int | None:
    """Train rollouts ``args.start_rollout_id .. args.num_rollout - 1`` on the schedule of ``mode``, ``lag``, ``seed``;
    returns the last trained rollout when it stopped at the time-limit warning (``start - 1`` when none
    was) or at the canary's stop, else None.

    ``rollout_manager`` is slime's RolloutManager actor handle (``generate.remote``, ``save.remote``);
    ``actor_model`` slime's RayTrainGroup (``async_train``, ``update_weights``, ``save_model``, and its
    trainer actors ``_actor_handlers``); ``get`` is ``ray.get``; ``periodic`` is slime's
    ``should_run_periodic_action``; ``stop_requested`` (the time-limit warning came) ends the loop at
    once, with a save; ``ready(ref)`` waits up to POLL_SECONDS for a generation and says whether it is done;
    ``diverged(rollout_id)`` (the step's loss or grad norm is not finite) ends the loop after that step,
    with no save and no wait for the generations in flight (finish): the run is over, and slime skipped
    that step's update. ``canary`` (engines.slime.canary): at canary_end, a save of that step, Megatron and
    HF, as a periodic save writes them, then in a fresh job the stop (its rollout returned, as at the
    warning) and in a resumed one the end."""
    check_lag(lag, mode)
    start, end = args.start_rollout_id, args.num_rollout

    def version(rollout_id: int) -> int:
        return driver_version(rollout_id, mode=mode, lag=lag, seed=seed, start=start)

    last_canary = canary_end(mode=mode, lag=lag, seed=seed, start=start, end=end) if canary else None
    in_flight, generated, data_source_saved, following = {}, {}, {}, start
    saved = start - 1  # the step the job resumed from is on disk already

    def generate_sampled_by(pushed: int) -> None:
        nonlocal following
        while following < end and version(following) == pushed:
            in_flight[following] = rollout_manager.generate.remote(following)
            if args.rollout_global_dataset:  # runs next on the actor: the position after this rollout's prompts
                data_source_saved[following] = rollout_manager.save.remote(following)
            following += 1

    def collect(rollout_id: int) -> bool:
        """Wait for rollout_id's generation unless the warning comes first; False: it came."""
        while not ready(in_flight[rollout_id]):
            if stop_requested():
                return False
        generated[rollout_id] = get(in_flight.pop(rollout_id))
        return True

    def stop_at(rollout_id: int) -> int:
        if rollout_id != saved:
            get([handle.__ray_call__.remote(megatron_save_only, rollout_id) for handle in actor_model._actor_handlers])
        return rollout_id

    actor_model.update_weights()
    generate_sampled_by(start)
    for rollout_id in range(start, end):
        if stop_requested() or (rollout_id in in_flight and not collect(rollout_id)):
            return stop_at(rollout_id - 1)
        data = generated.pop(rollout_id)
        if rollout_id in data_source_saved:
            get(data_source_saved.pop(rollout_id))  # done with its generation: a save error surfaces here
        get(actor_model.async_train(rollout_id, data))
        if diverged(rollout_id):
            break
        if canary and rollout_id == last_canary:  # the paths every job of the grid goes through, walked
            if saved != rollout_id:
                actor_model.save_model(rollout_id, force_sync=True)
            if start == 0:
                return rollout_id  # the stop: the canary resumes from this save
            break
        if periodic(rollout_id, args.save_interval, num_rollout_per_epoch, end):
            actor_model.save_model(rollout_id, force_sync=stop_requested() or rollout_id == end - 1)
            saved = rollout_id
        if rollout_id == end - 1:
            break
        if stop_requested():
            return stop_at(rollout_id)
        if following < end and version(following) == rollout_id + 1:
            # finish every generation in flight first: a push must not land in the middle of one
            if not all(collect(r) for r in list(in_flight)):
                return stop_at(rollout_id)
            actor_model.update_weights()
            generate_sampled_by(rollout_id + 1)
    return None


def check_args(args) -> dict:
    """The schedule from the custom config (mode, lag, seed), and the slime settings this driver does not support."""
    missing = [key for key in ("stalebench_lag_mode", "stalebench_lag", "stalebench_seed") if not hasattr(args, key)]
    if missing:
        raise ValueError(f"the custom config (--custom-config-path) lacks {missing}: write it with engines.slime.job_script")
    check_lag(args.stalebench_lag, args.stalebench_lag_mode)
    for flag, attribute in (("--colocate", "colocate"), ("--use-critic", "use_critic"),
                            ("--release-train", "release_train")):
        if getattr(args, attribute, False):
            raise ValueError(f"engines.slime.driver does not support {flag}")
    return {"mode": args.stalebench_lag_mode, "lag": args.stalebench_lag, "seed": args.stalebench_seed}


def main() -> None:
    import ray
    from slime.observability.logging_utils import configure_logger, finish_tracking, init_tracking
    from slime.ray.placement_group import create_placement_groups, create_rollout_manager, create_training_models
    from slime.utils.arguments import parse_args
    from slime.utils.misc import should_run_periodic_action

    args = parse_args()
    schedule = check_args(args)
    configure_logger()
    placement_groups = create_placement_groups(args)
    init_tracking(args)
    rollout_manager, num_rollout_per_epoch = create_rollout_manager(args, placement_groups["rollout"])
    actor_model, _ = create_training_models(args, placement_groups, rollout_manager)
    run, fp16 = RunDir(args.stalebench_run_dir), bool(getattr(args, "fp16", False))  # Megatron's --fp16
    optimizer_log = os.environ.get("STALEBENCH_OPTIMIZER_LOG")  # the GPU resume check's (engines.slime.resume_check)
    if optimizer_log:
        record_optimizer(optimizer_log, "loaded", args.start_rollout_id - 1, actor_model, ray.get)
    stopped = lag_loop(args, rollout_manager, actor_model, **schedule, num_rollout_per_epoch=num_rollout_per_epoch,
                       get=ray.get, periodic=should_run_periodic_action,
                       stop_requested=stop_check(run.engine_file("stop_requested"),  # the trap's mark
                                                 getattr(args, "stalebench_stop_at", None)),
                       ready=lambda ref: bool(ray.wait([ref], timeout=POLL_SECONDS)[0]),
                       # the writer rank appended the step's row before its training call returned
                       diverged=lambda rollout_id: first_non_finite(run.read_metrics(), fp16=fp16) is not None,
                       canary=getattr(args, "stalebench_canary", False))
    if optimizer_log and stopped is not None:  # the state its save holds
        record_optimizer(optimizer_log, "saved", stopped, actor_model, ray.get)
    if finish(stopped, run, rollout_manager, ray.get, fp16=fp16) == "completed":
        finish_tracking(args)


def finish(stopped: int | None, run: RunDir, rollout_manager, get: Callable, *, fp16: bool) -> str:
    """How the job ends after lag_loop: "stopped" at the time limit (its ``stopped`` mark written once the
    save is on disk), "diverged" (a non-finite step, engines.slime.metrics.first_non_finite) or "completed".
    Only a completed job disposes of the rollout manager: ``dispose`` would queue on the actor behind the
    generations still in flight (up to ``lag`` at interval lag), which a stopped or diverged job has no use
    for; the job script's ``ray stop`` ends them."""
    if stopped is not None:
        write_text_atomic(run.engine_file("stopped"), f"{stopped}\n")
        return "stopped"
    if first_non_finite(run.read_metrics(), fp16=fp16) is not None:
        return "diverged"
    get(rollout_manager.dispose.remote())
    return "completed"


if __name__ == "__main__":
    main()
