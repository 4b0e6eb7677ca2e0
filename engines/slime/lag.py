"""Which trainer version a slime rollout was sampled by, from SGLang's weight version (Sample.weight_versions).

slime counts weight pushes: every ``update_weights`` call increments the trainer's weight
version and tags the SGLang engines with it, so a sample's ``weight_versions`` holds the push
count of the weights that generated it (1 = the first push, made before training). Both lag
modes push the weights at the start, after trainer version ``start`` (the first rollout id of
this job; 0 on a fresh run, the resumed step otherwise):

- interval (slime's train_async.py, ``--update-weights-interval n``): afterwards a push follows
  every trainer step whose rollout id r has (r + 1) % n == 0, so push v >= 2 carries trainer
  version (start // n + v - 1) * n. Realized lag = r - version cycles 1..n (the paper's "lag n").
- constant (engines.slime.driver): a push after every trainer step, so push v carries version
  start + v - 1, and the driver samples rollout r after push r - n + 1 (lag n after warm-up).

Realized lag of rollout r = r - version (r optimizer steps have been taken before it is trained;
the same definition as the tiny engine: step - 1 - policy_version).
"""
from __future__ import annotations

from harness.grid import LAG_MODES


def trainer_version(weight_version: int, *, mode: str, lag: int, start: int) -> int:
    """The trainer version (optimizer steps taken) whose weights slime pushed as ``weight_version``."""
    if mode not in LAG_MODES:
        raise ValueError(f"lag mode {mode!r}; expected one of {list(LAG_MODES)}")
    if weight_version < 1:
        raise ValueError(f"slime weight version {weight_version} < 1: the first push is version 1")
    if weight_version == 1:
        return start
    if mode == "interval":
        return (start // lag + weight_version - 1) * lag
    return start + weight_version - 1


def constant_lag_version(rollout_id: int, *, lag: int, start: int) -> int:
    """The trainer version that samples rollout ``rollout_id`` under a constant lag (the driver's
    schedule): ``rollout_id - lag``, but never older than the job's starting weights."""
    return max(start, rollout_id - lag)
