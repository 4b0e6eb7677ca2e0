"""SAPO: a soft sigmoid gate instead of PPO's hard clip (Soft Adaptive Policy Optimization,
arXiv 2511.20347).

    r_t = exp(logp_t - ref_t)                  (ref = old_logp, as SAPO runs without decoupling)
    g_t = (4 / tau) sigmoid(tau (r_t - 1)),    tau = tau_pos where A_t > 0, tau_neg elsewhere
    loss = token-mean of  -g_t A_t

The gate's slope, 4 sigmoid (1 - sigmoid) r, is 1 at r = 1 (the policy gradient on-policy) and
fades smoothly as r leaves 1, where PPO's clip cuts it to 0 at once; tau_neg > tau_pos fades
negative-advantage tokens faster. Defaults tau_pos 1.0, tau_neg 1.05: the paper's, as issue 26's
survey reports them (not re-checked against the paper here). The form (the 4 / tau scale, the gate
chosen by the sign of A, the token mean) is AReaL's ``sapo_loss_fn``
(inclusionAI/AReaL areal/utils/functional/functional.py), which this module follows.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


@register("sapo")
@ranges(tau_pos="(0, inf)", tau_neg="(0, inf)")
def sapo(
    batch: PolicyBatch,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    ratio_against: str = "old",
    aggregation: str = "token_mean",
) -> LossOutput:
    ratio = torch.exp(log_ratio(batch, ratio_against))
    positive = batch.advantages > 0
    tau = torch.where(positive, torch.full_like(ratio, tau_pos), tau_neg)  # ratio's dtype, made on its device
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)
    metrics = {
        "sapo/gate_mean": masked_mean(gate.detach(), batch.active),
        "ratio/mean": masked_mean(ratio.detach(), batch.active),
    }
    return LossOutput(aggregate(gate * batch.advantages.detach(), batch, aggregation), metrics)
