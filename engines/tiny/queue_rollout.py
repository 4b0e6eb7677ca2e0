"""The tiny engine's lag driver for lag_mode queue: every group (prompt) of a batch is sampled by
the version its own lag names (harness.lag.group_lags, drawn from harness.queue_lag's model), and
the versions the engine actually held are recorded per group.

The engine holds one copy of the weights, so a batch is generated version by version, oldest first
(each version's groups in one call, seeded by (run seed, step, version)), and reassembled in group
order: rows p * samples ... (p + 1) * samples - 1 are group p's, as in every other mode.
"""
from __future__ import annotations

import torch

from harness.lag import check_realized_lag, group_lags
from harness.queue_lag import group_draws

from . import task
from .batch import step_seed
from .rollout import Rollout


def generate_queued(trainer, step: int) -> Rollout:
    """The batch of ``step`` for a Trainer in queue mode at a lag > 0 (its engine, snapshots, params,
    schedule; at lag 0 every mode is the synchronous loop)."""
    params, samples = trainer.params, trainer.params["samples_per_step"]
    problems = task.problems("train", params["prompts_per_step"], seed=step_seed(trainer.seed, step, 0))
    wanted = [step - 1 - lag for lag in group_lags(step, trainer.lag, trainer.seed, trainer.queue)]
    parts, used = [], [0] * len(wanted)
    for version in sorted(set(wanted)):
        groups = [group for group, v in enumerate(wanted) if v == version]
        if trainer.engine.version != version:
            trainer.engine.broadcast(trainer.snapshots[version], version)
        part = trainer.engine.rollout(step, [problems[g] for g in groups], samples, params["reward"],
                                      seed=step_seed(trainer.seed, step, 1) * 1_000_003 + version,
                                      sampler_pass=trainer.sampler_pass(step))
        for group in groups:
            used[group] = part.version
        parts.append((groups, part))
    rows = [0] * (len(wanted) * samples)  # batch row -> (part, row in part)
    for index, (groups, _) in enumerate(parts):
        for position, group in enumerate(groups):
            for sample in range(samples):
                rows[group * samples + sample] = (index, position * samples + sample)
    tensors = {name: torch.stack([getattr(parts[i][1], name)[r] for i, r in rows]) for name in Rollout.TENSORS
               if parts[0][1].tensors()[name].numel()}
    tensors.setdefault("logp_sampler", torch.empty(0))  # the sampler pass skipped (Trainer.sampler_pass)
    return Rollout(step=step, version=min(used), group_versions=tuple(used), **tensors)


def group_record(step: int, batch: Rollout, trainer) -> dict:
    """The per-group lags the engine realized, each checked against the mode's bound (LagOutOfBound
    naming the step), and the groups' modelled relative lengths: the step's metrics columns."""
    lags = [step - 1 - version for version in batch.group_versions]
    for lag in lags:
        check_realized_lag(step, lag, trainer.lag, trainer.mode)
    lengths = [length for _, length in group_draws(trainer.queue, step, trainer.seed)]
    return {"queue/lags": lags, "queue/lengths": [round(length, 6) for length in lengths],
            "queue/lag_mean": sum(lags) / len(lags)}
