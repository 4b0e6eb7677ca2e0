"""The GPU resume check's measurements and verdicts (tests/engines/slime/test_slime_gpu_resume.py), which run on a
CPU too (tests/engines/slime/test_slime_resume_check.py).

A resume can pass only where both sides train on the same rollouts: the check replays rollouts recorded once
(slime's ``--save-debug-rollout-data`` / ``--load-debug-rollout-data``), so that what is left between two runs is
the trainer's own nondeterminism, measured as a noise floor (the same replayed run twice, no resume). Then:

- ``adam_state``: Adam's ``step`` and the norms of its two moments, from a torch optimizer state dict (what
  torch.optim.Adam and Megatron's CPU-offloaded HybridDeviceOptimizer return). ``optimizer_states`` reads them
  inside each slime trainer actor (through Ray's ``__ray_call__``, as engines.slime.driver's stop save runs);
  the driver appends them to $STALEBENCH_OPTIMIZER_LOG after its job loaded its save and when it stopped
  (``record_optimizer``), so that the state saved and the state loaded are compared directly: the open
  upstream reports of a resume with CPU-offloaded Adam giving wrong numbers without a crash
  (Megatron-LM #1842, SkyRL #1403) are about exactly these.
- ``adam_problems``: a loaded state whose step differs from the saved one, or whose moment norms differ by
  more than ``rel`` (the loaded bits should be the saved ones).
- ``noise_floor`` and ``resume_problems``: per metric, the largest relative difference of two runs without a
  resume; a resumed run's step whose difference from the uninterrupted run's exceeds ``margin`` times it
  (and ``floor_min``, a floor of exact zeros being no tolerance at all).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

KEYS = ("loss", "grad_norm")


def adam_state(state_dict: dict) -> dict:
    """``{"step", "exp_avg_norm", "exp_avg_sq_norm", "params"}`` of a torch optimizer state dict; ``step``: the
    one step count all parameters share (ValueError naming the counts when they differ)."""
    states = list(state_dict["state"].values())
    if not states:
        return {"step": 0, "exp_avg_norm": 0.0, "exp_avg_sq_norm": 0.0, "params": 0}
    steps = sorted({float(state["step"]) for state in states})
    if len(steps) > 1:
        raise ValueError(f"Adam's parameters hold different step counts {steps[:5]}: a partial load")

    def norm(key: str) -> float:
        return math.sqrt(sum(float(state[key].double().pow(2).sum()) for state in states))
    return {"step": steps[0], "exp_avg_norm": norm("exp_avg"), "exp_avg_sq_norm": norm("exp_avg_sq"),
            "params": len(states)}


def optimizer_states(actor) -> list[dict]:
    """(Runs inside a slime trainer actor.) adam_state of each torch optimizer under the actor's Megatron optimizer
    (a ChainedOptimizer's, else its own inner one)."""
    chained = getattr(actor.optimizer, "chained_optimizers", [actor.optimizer])
    return [adam_state(megatron.optimizer.state_dict()) for megatron in chained]


def record_optimizer(path: str, when: str, rollout_id: int, actor_model, get: Callable) -> None:
    """Append every trainer rank's optimizer_states, ``when`` ("loaded" or "saved") at ``rollout_id``, to ``path``."""
    ranks = get([handle.__ray_call__.remote(optimizer_states) for handle in actor_model._actor_handlers])
    with open(path, "a") as log:
        log.write(json.dumps({"when": when, "rollout_id": rollout_id, "ranks": ranks}) + "\n")


def adam_problems(log: Path, rel: float = 1e-6) -> list[str]:
    """Each rank whose state loaded at a rollout differs from the one saved there (step, moment norms)."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    saved = {record["rollout_id"]: record["ranks"] for record in records if record["when"] == "saved"}
    found = []
    for record in (r for r in records if r["when"] == "loaded" and r["rollout_id"] >= 0):
        before = saved.get(record["rollout_id"])
        if before is None:
            found.append(f"{log}: a load at rollout {record['rollout_id']} with no save recorded there")
            continue
        for rank, (was, now) in enumerate(zip(before, record["ranks"], strict=True)):
            for index, (a, b) in enumerate(zip(was, now, strict=True)):
                if a["step"] != b["step"]:
                    found.append(f"rank {rank} optimizer {index}: Adam's step {b['step']} after the load, "
                                 f"{a['step']} saved at rollout {record['rollout_id']}")
                for key in ("exp_avg_norm", "exp_avg_sq_norm"):
                    if relative(a[key], b[key]) > rel:
                        found.append(f"rank {rank} optimizer {index}: {key} {b[key]!r} after the load, {a[key]!r} "
                                     f"saved at rollout {record['rollout_id']}")
    return found


def relative(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def noise_floor(first: dict[int, dict], second: dict[int, dict], keys=KEYS) -> dict[str, float]:
    """Per key, the largest relative difference of two runs' rows (step -> row) over the steps both logged."""
    if sorted(first) != sorted(second):
        raise ValueError(f"the runs logged steps {sorted(first)} and {sorted(second)}")
    return {key: max(relative(first[step][key], second[step][key]) for step in first) for key in keys}


def resume_problems(uninterrupted: dict[int, dict], resumed: dict[int, dict], floor: dict[str, float], after: int,
                    margin: float = 3.0, floor_min: float = 1e-6) -> list[str]:
    """Each step after ``after`` (the step the resume loaded) and key where the resumed run leaves the
    uninterrupted one by more than ``margin`` x the noise floor (at least ``floor_min``)."""
    if sorted(resumed) != sorted(uninterrupted):
        return [f"the resumed run logged steps {sorted(resumed)}, the uninterrupted one {sorted(uninterrupted)}"]
    found = []
    for step in (s for s in sorted(resumed) if s > after):
        for key, noise in floor.items():
            limit = margin * max(noise, floor_min)
            if (difference := relative(resumed[step][key], uninterrupted[step][key])) > limit:
                found.append(f"step {step} {key}: {resumed[step][key]!r} resumed, {uninterrupted[step][key]!r} "
                             f"uninterrupted (relative {difference:.2e} > {limit:.2e}, {margin:g} x the noise floor)")
    return found
