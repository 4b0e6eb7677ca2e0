"""OPSM, Off-Policy Sequence Masking: zero every token of a negative-advantage response that has
drifted from the reference policy (DeepSeek-V3.2, arXiv 2512.02556; built into slime as
``--use-opsm``).

    r_t   = exp(logp_t - ref_t)                                    (ref = old_logp by default)
    KL_b  = mean over b's active tokens of (ref_t - logp_t)        (detached: the mask carries no gradient)
    A_b   = mean over b's active tokens of A_t                     (the response's advantage)
    M_b   = 0 if A_b < 0 and KL_b > delta, else 1                  (one decision for the whole response)
    loss  = token-mean of  -M_b min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)

The rule is per sequence, as the paper states it: with token advantages that differ within a
response (a token-level KL penalty, process rewards), a masked response keeps none of its tokens.
slime at the pin decides per token (slime/utils/ppo_utils.py compute_opsm_mask compares each
token's advantage with 0; the fix, slime PR #1917, is open); the two agree whenever a response's
tokens share one advantage (GRPO's). A masked token stays in the denominator (slime multiplies the
per-token loss by the mask before its usual reduction). delta = 1e-4 (``--opsm-delta``'s default)
and the KL against the trainer's old log-probs, as slime's; those are mu only under
``--use-rollout-logprobs``, and ratio_against="rollout" is that form (the drift from the sampler,
staleness included). delta = inf masks nothing: GRPO bit for bit.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, clip_bounds, clip_metrics, clipped_objective, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


@register("opsm")
@ranges(delta="[0, inf]", eps_low="[0, 1)", eps_high="[0, inf)")
def opsm(
    batch: PolicyBatch,
    *,
    delta: float = 1e-4,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_against: str = "old",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_r = log_ratio(batch, ratio_against)
    ratio = torch.exp(log_r)
    low, high = clip_bounds(eps_low, eps_high, ratio)
    active = batch.active
    tokens = active.sum(-1, keepdim=True).clamp(min=1)
    drift = -torch.where(active, log_r.detach(), 0.0).sum(-1, keepdim=True) / tokens
    response_advantage = torch.where(active, batch.advantages, 0.0).sum(-1, keepdim=True) / tokens
    masked = ((response_advantage < 0) & (drift > delta)).expand_as(active)  # [B, 1] -> every token of b
    objective = torch.where(masked, 0.0, clipped_objective(ratio, batch.advantages, low, high))
    metrics = clip_metrics(ratio, batch, low, high)
    metrics["opsm/masked_frac"] = masked_mean(masked.to(ratio.dtype), active)
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
