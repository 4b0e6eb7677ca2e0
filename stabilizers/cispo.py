"""CISPO: clip the importance-sampling weight, not the update (MiniMax-M1, arXiv 2506.13585,
Sec. 3.1, the CISPO objective; beyond.md "CISPO").

    r_t  = exp(logp_t - ref_t)                  (ref = old_logp by default)
    loss = token-mean of  -sg(clamp(r_t, 1 - eps_low, 1 + eps_high)) * A_t * logp_t

Every token keeps a gradient, sg(w_t) A_t grad(logp_t), bounded by the clamp (PPO's clip zeroes
the gradient of clipped tokens instead). eps_low 1.0 (no lower bound) and eps_high 4.0 are the
values beyond.md reports from AReaL and slime (not re-checked here; MiniMax's own eps_high unverified). The
loss value is the REINFORCE form (its gradient is the objective's), not r A.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_fraction, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


@register("cispo")
@ranges(eps_low="[0, 1]", eps_high="[0, inf]")
def cispo(
    batch: PolicyBatch,
    *,
    eps_low: float = 1.0,
    eps_high: float = 4.0,
    ratio_against: str = "old",
    aggregation: str = "token_mean",
) -> LossOutput:
    ratio = torch.exp(log_ratio(batch, ratio_against)).detach()
    low, high = 1.0 - eps_low, 1.0 + eps_high
    weight = ratio.clamp(min=low, max=high)
    objective = weight * batch.advantages * batch.logp
    metrics = {
        "cispo/frac_clipped": masked_fraction((ratio < low) | (ratio > high), batch.active, ratio.dtype),
        "cispo/weight_mean": masked_mean(weight, batch.active),
        "ratio/mean": masked_mean(ratio, batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
