"""The lag schedule of every engine: which policy version samples the batch of each trainer step.

Versions: version v = the trainer's weights after v optimizer steps (version 0 = the base). The
batch of trainer step s (1-based; slime's rollout id s - 1) is trained by version s - 1, so its
realized lag is (s - 1) - the version that sampled it. Modes (docs/design.md, "Lag"):

- interval (the paper's): weights are broadcast after every ``lag``-th step and the next batch is
  generated during the current step: version lag * floor((s - 2) / lag), realized lag cycles 1..lag.
- constant: exactly ``lag`` versions old: version s - 1 - lag.
- bounded (AReaL's max_head_offpolicyness, arXiv 2505.24298): each batch's lag is a seeded draw
  d(s) in 0..lag, and the version is max(version(s - 1), s - 1 - d(s)): a rollout engine holds one
  copy of the weights and only ever receives newer ones (as SGLang in slime, AReaL's servers), so
  the version never goes back and the realized lag is at most d(s).
- queue: each group (prompt) of a batch has a lag of its own, drawn in 0..lag from a model of a
  fully asynchronous system in which long responses are staler (harness.queue_lag; the settings
  ``lag_queue`` of the run config): the batch's version is its oldest group's, and an engine that
  samples every group with its own version realizes it (the tiny engine; per-group lags are
  recorded per step). A batch's realized lag is its stalest group's.

Every mode is clamped at version 0 (the first batches can only come from the base model), and at
lag 0 every mode is the synchronous loop: the batch of step s is sampled by version s - 1, the
weights that train on it. Pure functions of (mode, lag, step, seed), read by both engines (the
tiny trainer and engines.slime.driver; queue also of its QueueModel); ``check_realized_lag`` is the bound each engine checks on
every step it trains, written independently of the schedule so that a wrong schedule fails it.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

from harness.queue_lag import QueueModel, group_draws

LAG_MODES = ("interval", "constant", "bounded", "queue")


class LagOutOfBound(RuntimeError):
    """A step trained on a batch whose realized lag leaves its mode's bound."""


def check_lag(lag, mode: str) -> None:
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
        raise ValueError(f"lag must be an integer >= 0, got {lag!r}")
    if mode not in LAG_MODES:
        raise ValueError(f"lag_mode must be one of {list(LAG_MODES)}, got {mode!r}")


def bounded_draw(step: int, lag: int, seed: int) -> int:
    """The seeded lag drawn for ``step`` in 0..lag (sha256 of the run seed and step: the same
    number on every machine and Python, independent of any random generator's state)."""
    digest = hashlib.sha256(f"stalebench-bounded-lag:{seed}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (lag + 1)


@lru_cache(maxsize=64)
def _bounded_versions(lag: int, seed: int, steps: int) -> tuple[int, ...]:
    versions, version = [], 0
    for step in range(1, steps + 1):
        version = max(version, step - 1 - bounded_draw(step, lag, seed))
        versions.append(version)
    return tuple(versions)


def group_lags(step: int, lag: int, seed: int, queue: QueueModel) -> list[int]:
    """Queue mode: the lag of each group of step ``step``'s batch (all 0 at lag 0: the synchronous loop)."""
    if lag == 0:
        return [0] * queue.batch
    return [group_lag for group_lag, _ in group_draws(queue, step, seed)]


def sampling_version(step: int, lag: int, mode: str, seed: int, queue: QueueModel | None = None) -> int:
    """The policy version that samples the batch of trainer step ``step`` (1-based); in queue mode
    (``queue``: its model) the oldest of its groups' versions."""
    check_lag(lag, mode)
    if step < 1:
        raise ValueError(f"trainer steps count from 1, got {step}")
    if lag == 0:
        return step - 1
    if mode == "interval":
        return 0 if step < 2 else lag * ((step - 2) // lag)
    if mode == "constant":
        return max(0, step - 1 - lag)
    if mode == "queue":
        return step - 1 - max(group_lags(step, lag, seed, _needed(queue)))
    # bounded: the cache holds whole schedules, so grow it in blocks rather than step by step
    return _bounded_versions(lag, seed, -(-step // 256) * 256)[step - 1]


def canary_step(lag: int, mode: str, seed: int, steps: int, queue: QueueModel | None = None) -> int:
    """Where an engine's canary stops its first job (engines.canary): the first step by which batches sampled by
    two versions after the base (two pushes of trained weights to the sampler) were trained and one batch was
    sampled ``lag`` steps back; ``steps`` if the run is shorter."""
    newer, deepest = set(), 0
    for step in range(1, steps + 1):
        version = sampling_version(step, lag, mode, seed, queue)
        newer.update([version] if version > 0 else [])
        deepest = max(deepest, step - 1 - version)
        if len(newer) >= 2 and deepest >= lag:
            return step
    return steps


def newest_sampling_version(step: int, lag: int, mode: str, seed: int, queue: QueueModel | None = None) -> int:
    """The newest version any group of step ``step``'s batch is sampled by (queue mode: its freshest
    group's; every other mode samples a batch with one version)."""
    if mode == "queue" and lag > 0:
        return step - 1 - min(group_lags(step, lag, seed, _needed(queue)))
    return sampling_version(step, lag, mode, seed)


def _needed(queue: QueueModel | None) -> QueueModel:
    if queue is None:
        raise ValueError("lag_mode 'queue' needs its queue model (run config key 'lag_queue')")
    return queue


def oldest_needed_version(step: int, lag: int, mode: str, seed: int) -> int:
    """The oldest version that samples any batch of step ``step`` or later (every mode's version
    is non-decreasing in the step; a queue batch's groups are at most ``lag`` old): older weights
    may be dropped."""
    if mode == "queue":
        return max(0, step - 1 - lag)
    return sampling_version(step, lag, mode, seed)


def lag_bound(step: int, lag: int, mode: str, start_version: int = 0) -> tuple[int, int]:
    """The realized lags (lowest, highest) that ``mode`` allows at ``step``: interval 1..lag,
    constant exactly lag, bounded and queue (each group) 0..lag, each capped at step - 1 - ``start_version`` (no batch
    is older than the first weights of the job: the base model, or on slime a resumed job's
    trainer, which keeps no older weights)."""
    check_lag(lag, mode)
    highest = min(lag, step - 1 - start_version)
    lowest = {"interval": min(1, highest), "constant": highest, "bounded": 0, "queue": 0}[mode]
    return lowest, highest


def check_realized_lag(step: int, realized_lag: int, lag: int, mode: str, start_version: int = 0) -> None:
    """LagOutOfBound naming the step when ``realized_lag`` leaves its mode's bound at ``step``."""
    lowest, highest = lag_bound(step, lag, mode, start_version)
    if not lowest <= realized_lag <= highest:
        raise LagOutOfBound(f"step {step}: realized lag {realized_lag} leaves the {mode} bound "
                            f"{lowest}..{highest} of lag {lag}")
