"""TOPR, Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286; in ROLL, verl PR #6986,
and a baseline of Score Centering's code; all three third-party excerpts here, the paper not read):
REINFORCE whose responses with a negative advantage are weighted by their sequence ratio tapered to
[0, 1], the others by 1.

    R_i = prod_t pi(y_t) / mu(y_t) over response i's active tokens   (ratio_against rollout: mu)
    w_i = 1 if A_i >= 0, else min(R_i, 1)                            (detached)
    loss = token-mean of  -w_i A_i log pi(y_t)

The point of the Score Centering code's ISCorrection grid that it names "topr" (MJ10/score-centering,
sweeps/06b_quant_stale.yaml: level seq_sum, high 1.0, outside clamp, sign neg; losses.py: a
non-negative advantage is "positive", weights are detached REINFORCE coefficients over the token
count). TOPR has no parameter but the reference and the aggregation. The sequence log-ratio is
capped at 0 before exp: the weight is min(R, 1) without overflow (the code clamps it to [-20, 20],
so that a weight below e^-20 is e^-20 there and smaller here).
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


@register("topr")
@ranges()
def topr(
    batch: PolicyBatch,
    *,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_r = torch.where(batch.active, log_ratio(batch, ratio_against).detach(), 0.0)
    sequence_log_r = log_r.sum(-1, keepdim=True).expand_as(log_r)
    negative = batch.advantages < 0
    weight = torch.where(negative, sequence_log_r.clamp(max=0.0).exp(), 1.0)
    objective = weight * batch.advantages * batch.logp
    metrics = {
        "topr/negative_weight_mean": masked_mean(weight, batch.active & negative),
        "topr/tapered_frac": masked_mean((negative & (sequence_log_r < 0)).to(weight.dtype), batch.active),
        "ratio/mean": masked_mean(log_r.exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
