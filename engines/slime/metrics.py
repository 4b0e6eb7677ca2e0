"""A slime run's training metrics (harness.run.RunDir.metrics_path), in the tiny engine's schema, from three slime hooks.

1. Rollout side, ``--custom-rollout-log-function-path engines.slime.metrics.log_rollout``: for
   every generated rollout, the SGLang weight versions of its samples (Sample.weight_versions)
   -> the trainer version that sampled it (engines.slime.weight_versions) -> the run's rollout log.
2. Trainer side, ``--rollout-data-postprocess-path engines.slime.metrics.postprocess``: called on
   every trainer rank after the log-probs are recomputed and before the step trains. d =
   log_probs - rollout_log_probs (log pi - log mu at the start of the step) over active tokens
   is all-gathered over Megatron's data-parallel group, so mean |d| and the p50/p90/p99/max
   quantiles are exact over the whole step (engines.mismatch, the tiny engine's linear quantiles, at any
   size), plus the mean raw reward and the realized lag, checked against its mode's bound
   (harness.lag.check_realized_lag: outside it the hook raises, naming the step, and the job fails).
3. slime logs each trained step's scalars (train/loss, train/grad_norm, train/entropy_loss and
   the loss function's metrics such as train/sat/q) through
   ``slime.observability.logging_utils.log`` on one rank (data-parallel 0, tensor-parallel 0,
   last pipeline stage). The postprocess hook wraps that function once on that rank; the wrapper
   completes the pending row with those scalars and appends it to the metrics file.

Rows: step = rollout id + 1, time (unix seconds, when the step began training), policy_version,
realized_lag, reward, entropy, grad_norm, loss, d/mean_abs, d/p50, d/p90, d/p99, d/max, and slime's train scalars without the ``train/`` prefix.
The run directory, lag mode, lag and seed come from the custom-config YAML (args.stalebench_*).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from engines.mismatch import abs_d_stats
from engines.slime.loss import refuse_unhandled_options
from engines.slime.weight_versions import trainer_version
from harness.io import append_jsonl_atomic, read_jsonl
from harness.lag import check_realized_lag
from harness.run import RunDir

_first_rollout_id: int | None = None  # rollout manager process: the first rollout id of this job
_recorder = None  # trainer writer rank: the MetricsRecorder


def run_of(args) -> RunDir:
    """The run folder named by the custom config (args.stalebench_run_dir)."""
    run_dir = getattr(args, "stalebench_run_dir", None)
    if not run_dir:
        raise ValueError("args.stalebench_run_dir is not set: pass the custom-config YAML written by "
                         "engines.slime.job_script with --custom-config-path")
    return RunDir(run_dir)


# --- 1. rollout side -----------------------------------------------------------------------

def sampling_version(args, rollout_id: int, weight_versions: list[list[str]], start: int) -> dict:
    """The sampling record of one rollout from its samples' SGLang weight versions."""
    pushes = sorted({int(v) for versions in weight_versions for v in versions})
    if not pushes:
        raise ValueError(f"rollout {rollout_id}: no sample carries a weight version (Sample.weight_versions)")
    schedule = {"mode": args.stalebench_lag_mode, "lag": int(args.stalebench_lag), "seed": int(args.stalebench_seed)}
    oldest, newest = (trainer_version(p, **schedule, start=start) for p in (pushes[0], pushes[-1]))
    return {"rollout_id": rollout_id, "policy_version": oldest, "policy_version_newest": newest,
            "realized_lag": rollout_id - oldest, "weight_versions": pushes, "start_version": start}


def log_rollout(rollout_id, args, samples, rollout_extra_metrics, rollout_time) -> bool:
    """slime's custom rollout log function; returns False so that slime's own logging still runs."""
    global _first_rollout_id
    if _first_rollout_id is None:
        _first_rollout_id = rollout_id  # the driver generates start_rollout_id first
    record = sampling_version(args, rollout_id, [sample.weight_versions for sample in samples], _first_rollout_id)
    append_jsonl_atomic(run_of(args).engine_file("rollouts"), [record])
    return False


def rollout_record(args, rollout_id: int) -> dict:
    """The last sampling record of ``rollout_id`` (a resumed job may have logged it before)."""
    path = run_of(args).engine_file("rollouts")
    records = [r for r in read_jsonl(path) if r["rollout_id"] == rollout_id]
    if not records:
        raise ValueError(f"{path} has no record of rollout {rollout_id}: is "
                         "--custom-rollout-log-function-path engines.slime.metrics.log_rollout set?")
    return records[-1]



def checked_rollout_record(args, rollout_id: int) -> dict:
    """``rollout_record``, its realized lag checked against its mode's bound (LagOutOfBound names the step)."""
    record = rollout_record(args, rollout_id)
    check_realized_lag(rollout_id + 1, record["realized_lag"], int(args.stalebench_lag), args.stalebench_lag_mode,
                       start_version=record["start_version"])
    return record

def first_non_finite(rows: list[dict], *, fp16: bool = False) -> dict | None:
    """The first row whose loss or grad norm is not finite (the run diverged at its step), or None.

    ``fp16``: a non-finite grad norm with a finite loss is a loss-scale overflow, not divergence. With
    Megatron's NaN check off, slime's train_one_step asks the optimizer to unscale the gradients
    (prepare_grads: the dynamic loss scaler finds inf in the scaled gradients and lowers its scale),
    skips the update and logs the step's grad norm as NaN. The weights are unchanged: a skipped step
    (overflow_steps), as expected while the scale comes down from its initial 2^32. Only a non-finite
    loss, which no skipped update explains, is divergence then."""
    keys = ("loss",) if fp16 else ("loss", "grad_norm")
    return next((row for row in rows if not all(math.isfinite(row.get(key, 0.0)) for key in keys)), None)


def overflow_steps(rows: list[dict]) -> list[int]:
    """The steps an fp16 run skipped at a loss-scale overflow (first_non_finite): a non-finite grad norm, a finite loss."""
    return [row["step"] for row in rows if math.isfinite(row.get("loss", 0.0))
            and not math.isfinite(row.get("grad_norm", 0.0))]


# --- 2. trainer side -----------------------------------------------------------------------

def local_abs_d(rollout_data: dict) -> torch.Tensor:
    """|log pi - log mu| over this rank's active response tokens, 1-D float32."""
    pieces = [(lp.float() - mu.float()).abs()[mask.bool()]
              for lp, mu, mask in zip(rollout_data["log_probs"], rollout_data["rollout_log_probs"],
                                      rollout_data["loss_masks"])]
    return torch.cat(pieces) if pieces else torch.zeros(0)


class MetricsRecorder:
    """Holds a step's mismatch statistics until slime logs that step's train scalars, then writes the row."""

    def __init__(self, args):
        self.args, self.pending = args, {}
        self.run = run_of(args)
        self.started = False

    def begin_step(self, rollout_id: int, row: dict) -> None:
        if not self.started:  # a resumed job recomputes every step from its first rollout on
            self.run.keep_metrics_through(rollout_id)
            self.started = True
        self.pending[rollout_id] = row

    def on_train_log(self, metrics: dict) -> None:
        rollout_id = int(metrics["train/step"])
        row = self.pending.pop(rollout_id, None)
        if row is None:
            return
        scalars = {key.removeprefix("train/"): float(value) for key, value in metrics.items() if key != "train/step"}
        row.update(scalars)
        row.update({"loss": scalars.get("loss", math.nan), "grad_norm": scalars.get("grad_norm", math.nan),
                    "entropy": scalars.get("entropy_loss", math.nan)})
        self.run.append_metrics([row])


def is_writer_rank() -> bool:
    """slime's logging rank: data-parallel 0, tensor-parallel 0, last pipeline stage."""
    from megatron.core import parallel_state as mpu
    return (mpu.get_data_parallel_rank(with_context_parallel=True) == 0
            and mpu.get_tensor_model_parallel_rank() == 0
            and mpu.is_pipeline_last_stage(ignore_virtual=True))


def tap_slime_train_log(recorder: MetricsRecorder) -> None:
    """Wrap slime.observability.logging_utils.log (once) so each train step's scalars reach ``recorder``."""
    from slime.observability import logging_utils
    original = logging_utils.log
    if getattr(original, "stalebench_tap", False):
        return

    def log(args, metrics, step_key):
        original(args, metrics, step_key)
        if step_key == "train/step":
            recorder.on_train_log(metrics)

    log.stalebench_tap = True
    logging_utils.log = log


def postprocess(args, rollout_id, rollout_data) -> None:
    """slime's rollout-data postprocess hook (every trainer rank, before the step trains)."""
    global _recorder
    refuse_unhandled_options(args)  # e.g. --use-rollout-logprobs: no recompute, so no log_probs on any stage
    if "log_probs" not in rollout_data:  # not the last pipeline stage: nothing to measure here
        return
    if "rollout_log_probs" not in rollout_data:
        raise ValueError("rollout_data has no rollout_log_probs: SGLang log-probs are needed for d = log pi - log mu")
    from megatron.core import parallel_state as mpu

    from stabilizers import TorchDistributedReduce
    group = mpu.get_data_parallel_group(with_context_parallel=True)
    gathered = TorchDistributedReduce(group=group).all_gather(local_abs_d(rollout_data))
    record = checked_rollout_record(args, rollout_id)  # every rank: a batch past its bound stops the whole job
    if not is_writer_rank():
        return
    if _recorder is None:
        _recorder = MetricsRecorder(args)
        tap_slime_train_log(_recorder)
    rewards = [float(r) for r in rollout_data["raw_reward"]]
    row = {"step": rollout_id + 1, "time": time.time(), "policy_version": record["policy_version"],
           "realized_lag": record["realized_lag"], "reward": float(np.mean(rewards)) if rewards else math.nan,
           **abs_d_stats(torch.cat(gathered).cpu())}
    _recorder.begin_step(rollout_id, row)
