"""TOPR with a per-token taper (Le Roux et al. 2025, arXiv 2503.14286), the form ROLL and Trinity-RFT
compute: each token of a response with a negative advantage is weighted by its own ratio pi/mu,
tapered to [0, 1]. `topr` (stabilizers/topr.py) tapers by the sequence's product instead.

    w_t = 1 if A >= 0, else min(pi(y_t) / mu(y_t), 1)     (detached)
    loss = token-mean of  -w_t A log pi(y_t)

This matches Trinity-RFT's `TOPRPolicyLossFn` (yanxi-chen/Trinity-RFT @ 5b77c08,
trinity/algorithm/policy_loss_fn/topr_policy_loss.py: alpha = clamp(ratio, 0, 1) where the advantage is
<= advantage_threshold 0, else 1; loss -sg(alpha) A log pi; token-mean). Its ratio is against
``old_logprob``, which is the sampler's log-probs when the data is off-policy; here that is
ratio_against rollout. An advantage of exactly 0 is tapered there and not here, which changes nothing,
because A = 0 contributes 0 either way. ROLL's TOPR loss was read in its docs only (third-party
excerpt), so it is cited but not compared.
"""
from __future__ import annotations

import torch

from ._surrogate import log_ratio
from .api import LossOutput, PolicyBatch, ranges, register
from .topr import tapered_reinforce


@register("topr_token")
@ranges()
def topr_token(
    batch: PolicyBatch,
    *,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_r = torch.where(batch.active, log_ratio(batch, ratio_against).detach(), 0.0)
    return tapered_reinforce(batch, log_r, log_r, "topr_token", aggregation)
