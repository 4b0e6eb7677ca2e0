"""IcePop: a double-sided mask on the training/inference mismatch, with masked importance
sampling (Ring-1T, arXiv 2510.18855, "IcePop"; beyond.md "IcePop").

    rho_t = exp(old_logp_t - log mu_t)  (pi_old / mu at the same weights: engine mismatch + staleness)
    loss  = token-mean of  -1[alpha <= rho_t <= beta] * rho_t * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)

Kept tokens are weighted by sg(rho) (``rho_weight=True``); the denominator keeps every active
token. Defaults alpha 0.5, beta 5.0 are AReaL's and rLLM's IcePop settings as beyond.md reports
them (neither they nor the paper's own values could be re-checked against a source here). With alpha 0, beta inf and rho_weight off it is
grpo bit for bit.
"""
from __future__ import annotations

import torch

from ._behaviour import behaviour_metrics, behaviour_ratio, weighted_clip_loss
from .api import LossOutput, PolicyBatch, ranges, register


@register("icepop")
@ranges(alpha="[0, inf)", beta="[alpha, inf]", rho_weight="bool", eps_low="[0, 1)", eps_high="[0, inf)")
def icepop(
    batch: PolicyBatch,
    *,
    alpha: float = 0.5,
    beta: float = 5.0,
    rho_weight: bool = True,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    aggregation: str = "token_mean",
) -> LossOutput:
    rho = behaviour_ratio(batch)
    keep = batch.active & (rho >= alpha) & (rho <= beta)
    weight = torch.where(keep, rho if rho_weight else torch.ones_like(rho), 0.0)
    out = weighted_clip_loss(batch, weight, eps_low=eps_low, eps_high=eps_high, dual_clip_c=None,
                             aggregation=aggregation)
    out.metrics.update(behaviour_metrics("icepop", batch, rho, keep))
    return out
