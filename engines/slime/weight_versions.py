"""The harness's lag schedule (harness.lag) as engines.slime.driver runs it, and which trainer version a
slime rollout was sampled by, from SGLang's weight version (Sample.weight_versions).

SGLang holds one copy of the weights and a job keeps no older trainer weights than its own start,
so the driver samples rollout r (trainer step r + 1) by ``driver_version(r)``: the schedule's
version, but never older than ``start`` (the first rollout id of this job; 0 on a fresh run, the
resumed step otherwise). Every mode's version is non-decreasing, so the driver pushes weights
exactly when the next rollout to generate needs a newer version than the engines hold.

slime counts weight pushes: every ``update_weights`` call increments the trainer's weight version
and tags the SGLang engines with it, so a sample's ``weight_versions`` holds the push count of
the weights that generated it: push 1 (before training) carries version ``start``, push v >= 2
the (v - 1)-th newer version the schedule moves to. Realized lag of rollout r = r - version (the
tiny engine's step - 1 - policy_version).
"""
from __future__ import annotations

from harness.lag import check_lag, sampling_version


def driver_version(rollout_id: int, *, mode: str, lag: int, seed: int, start: int) -> int:
    """The trainer version that samples rollout ``rollout_id`` in a job that started at ``start``."""
    return max(start, sampling_version(rollout_id + 1, lag, mode, seed))


def trainer_version(weight_version: int, *, mode: str, lag: int, seed: int, start: int) -> int:
    """The trainer version (optimizer steps taken) whose weights slime pushed as ``weight_version``."""
    check_lag(lag, mode)
    if weight_version < 1:
        raise ValueError(f"slime weight version {weight_version} < 1: the first push is version 1")
    version, pushes, rollout_id = start, 1, start
    while pushes < weight_version:  # every version is reached within lag + 1 rollouts
        rollout_id += 1
        following = driver_version(rollout_id, mode=mode, lag=lag, seed=seed, start=start)
        if following > version:
            version, pushes = following, pushes + 1
    return version
