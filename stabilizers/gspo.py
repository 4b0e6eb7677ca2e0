"""GSPO: the clip on the length-normalised sequence ratio (Zheng et al. 2025; methods.md "GSPO").

log s_b = mean over b's active tokens of (logp - ref);  s_b is broadcast to those tokens and
clipped like GRPO's token ratio; the gradient flows through the mean, so every token of a
response shares its sequence's clip decision. The paper ran it with eps 0.2 / 0.2 against
old_logp (the GSPO paper uses 3e-4 / 4e-4: set eps_low / eps_high in the recipe).
"""
from __future__ import annotations

import torch

from ._surrogate import (
    aggregate,
    clip_bounds,
    clip_metrics,
    clipped_objective,
    log_ratio,
    sequence_log_ratio,
)
from .api import LossOutput, PolicyBatch, ranges, register


@register("gspo")
@ranges(eps_low="[0, 1)", eps_high="[0, inf)")
def gspo(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_against: str = "old",
    aggregation: str = "token_mean",
) -> LossOutput:
    ratio = torch.exp(sequence_log_ratio(log_ratio(batch, ratio_against), batch.active))
    low, high = clip_bounds(eps_low, eps_high, ratio.dtype)
    objective = clipped_objective(ratio, batch.advantages, low, high)
    return LossOutput(aggregate(objective, batch, aggregation), clip_metrics(ratio, batch, low, high))
