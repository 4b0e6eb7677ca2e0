"""GRPO: the PPO token-clipped surrogate (Shao et al. 2024; SAT paper Eq. 3, methods.md "GRPO").

r_t = exp(logp_t - ref_t);  S_t = min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t);  loss = -agg(S).
The paper ratios against the trainer's recompute (ratio_against="old") with eps 0.2 / 0.2.
ratio_against="rollout" is "GRPO with rollout log-probs" (paper Table 8), the control that
separates SAT's gain from merely using mu. dual_clip_c bounds negative-advantage tokens by c A.
"""
from __future__ import annotations

import torch

from ._surrogate import (
    aggregate,
    clip_bounds,
    clip_metrics,
    clipped_objective,
    dual_clip,
    log_ratio,
    masked_fraction,
)
from .api import LossOutput, PolicyBatch, ranges, register


@register("grpo")
@ranges(eps_low="[0, 1]", eps_high="[0, inf)", dual_clip_c="(1, inf) or None")
def grpo(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    ratio_against: str = "old",
    aggregation: str = "token_mean",
) -> LossOutput:
    ratio = torch.exp(log_ratio(batch, ratio_against))
    low, high = clip_bounds(eps_low, eps_high, ratio)
    clipped = clipped_objective(ratio, batch.advantages, low, high)
    objective = dual_clip(clipped, batch.advantages, dual_clip_c)
    metrics = clip_metrics(ratio, batch, low, high)
    metrics["clip/frac_dual"] = masked_fraction(objective != clipped, batch.active, ratio.dtype)
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
