"""CISPO: clip the importance-sampling weight, not the update (MiniMax-M1, arXiv 2506.13585,
Sec. 3.1, the CISPO objective; beyond.md "CISPO"), in its asynchronous form.

    r_t  = exp(logp_t - ref_t)                  (ref = log mu, the sampler's, by default)
    loss = token-mean of  -sg(clamp(r_t, 1 - eps_low, 1 + eps_high)) * A_t * logp_t

Every token keeps a gradient, sg(w_t) A_t grad(logp_t), bounded by the clamp (PPO's clip zeroes
the gradient of clipped tokens instead). The loss value is the REINFORCE form (its gradient is
the objective's), not r A.

The ratio is taken against mu, the policy that sampled: the importance weight of data that is
stale or came from another engine (pi / mu = pi / pi_old x pi_old / mu, AReaL's behaviour weight
included). That is how the asynchronous frameworks run CISPO: prime-rl's CISPO loss weights by
rho = pi_train / pi_gen, the inference engine's log-probs, truncated above; an AReaL-backend CISPO
loss clamps pi / pi_old to [0, 5] where AReaL's ``logprobs`` are the rollout's. MiniMax's own
setting is synchronous, where pi_old = mu. ratio_against="old" (the `cispo_old` recipe) is the
ratio against the trainer's recompute: in an asynchronous loop r ~ 1 there and the loss is
uncorrected REINFORCE on stale data. eps_low 1.0 (no lower bound) and eps_high 4.0 give that
[0, 5] clamp (beyond.md reports them from AReaL and slime); MiniMax's own eps_high is unverified.
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
    ratio_against: str = "rollout",
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
