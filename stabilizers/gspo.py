"""GSPO: the clip on the length-normalised sequence ratio (Zheng et al. 2025, arXiv 2507.18071,
Eq. 5-7; methods.md "GSPO").

log s_b = mean over b's active tokens of (logp - ref);  s_b is broadcast to those tokens and
clipped like GRPO's token ratio; the gradient flows through the mean, so every token of a
response shares its sequence's clip decision. The SAT paper ran it with eps 0.2 / 0.2 against
old_logp (the GSPO paper uses 3e-4 / 4e-4: set eps_low / eps_high in the recipe);
ratio_against="rollout" is GSPO against mu (the `gspo_mu` control of SAT-GSPO).

Aggregation: one weight per response, loss = -mean_b S_b with S_b = min(s_b A_b, clip(s_b) A_b)
("sample_mean": the token mean of a response whose tokens share S_b is S_b). That is GSPO's
objective (1/G sum_i, Eq. 5), the SAT paper's Eq. 38 and verl's seq-mean-token-mean for GSPO;
"token_mean" would weight each response by its length.
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
    aggregation: str = "sample_mean",
) -> LossOutput:
    ratio = torch.exp(sequence_log_ratio(log_ratio(batch, ratio_against), batch.active))
    low, high = clip_bounds(eps_low, eps_high, ratio)
    objective = clipped_objective(ratio, batch.advantages, low, high)
    return LossOutput(aggregate(objective, batch, aggregation), clip_metrics(ratio, batch, low, high))
