"""TOPR, Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286; the paper not read), in
the form Score Centering's code runs it: the ratio is the whole sequence's product. REINFORCE weights a
response with a negative advantage by its sequence ratio, tapered to [0, 1], and every other response
by 1.

    R_i = prod_t pi(y_t) / mu(y_t) over response i's active tokens   (ratio_against rollout: mu)
    w_i = 1 if A_i >= 0, else min(R_i, 1)                            (detached)
    loss = token-mean of  -w_i A_i log pi(y_t)

This matches the point of the Score Centering code's ISCorrection grid that it names "topr"
(MJ10/score-centering @ 521e517, sweeps/06b_quant_stale.yaml: level seq_sum, high 1.0, outside clamp,
sign neg; losses.py `is_weights`: a non-negative advantage is "positive", the weights are detached
REINFORCE coefficients over the token count). Other frameworks compute other forms, which differ from
this one by 8-1300% in loss on the same batches (issue 62):
- ROLL and Trinity-RFT taper each token's own ratio. That is `topr_token` (stabilizers/topr_token.py).
- verl PR #6986 tapers the length-normalised sequence ratio (third-party excerpt; not built here).
TOPR has no parameter but the reference and the aggregation. The sequence log-ratio is capped at 0
before exp, so the weight is min(R, 1) without overflow. The code clamps the log-ratio to [-20, 20],
so a weight below e^-20 is e^-20 there and smaller here.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


def tapered_reinforce(batch: PolicyBatch, log_r: torch.Tensor, weight_log_r: torch.Tensor, name: str,
                      aggregation: str) -> LossOutput:
    """REINFORCE with the detached weight min(exp(weight_log_r), 1) on negative advantages, 1 elsewhere."""
    negative = batch.advantages < 0
    weight = torch.where(negative, weight_log_r.clamp(max=0.0).exp(), 1.0)
    objective = weight * batch.advantages * batch.logp
    metrics = {
        f"{name}/negative_weight_mean": masked_mean(weight, batch.active & negative),
        f"{name}/tapered_frac": masked_mean((negative & (weight_log_r < 0)).to(weight.dtype), batch.active),
        "ratio/mean": masked_mean(log_r.exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)


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
    return tapered_reinforce(batch, log_r, sequence_log_r, "topr", aggregation)
