"""SAT-GRPO: the staleness-adaptive trust region on token ratios (SAT paper Eq. 13-20; methods.md "SAT").

d = sg(logp - log mu); q = lower inverse-CDF alpha-quantile of |d| over active tokens (this
micro-batch, as in the paper, or every rank's with quantile_scope="global"). A token is gated
when q > 0 and |d| > q; there eps_high shrinks by psi(max(d, 0); q) and eps_low by
psi(max(-d, 0); q), psi(u; q) = 1 / (1 + (u / q)^2). Then the usual clipped surrogate with
r = exp(logp - log mu). enabled=False (or q = 0) is the fixed-clip loss bit for bit.
"""
from __future__ import annotations

import torch

from .api import LossOutput, PolicyBatch, register
from .surrogate import check_clip, contracted_clip_loss, log_ratio, sat_contraction, sat_gate, tail_index


@register("sat_grpo")
def sat_grpo(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    alpha: float = 0.9,
    quantile_scope: str = "microbatch",
    ratio_against: str = "rollout",
    enabled: bool = True,
    aggregation: str = "token_mean",
) -> LossOutput:
    check_clip(eps_low, eps_high)
    log_r = log_ratio(batch, ratio_against)
    magnitude = log_r.detach().abs()
    q, index = sat_gate(magnitude, batch, alpha, quantile_scope)
    if not enabled:
        q = torch.zeros_like(q)
        index = tail_index(magnitude, batch.active, q)  # none
    c_plus, c_minus = sat_contraction(log_r, q, index)
    out = contracted_clip_loss(batch, log_r, q, index, c_plus, c_minus,
                               eps_low=eps_low, eps_high=eps_high, aggregation=aggregation)
    out.metrics["sat/scope_global"] = torch.tensor(float(quantile_scope == "global"))
    return out
