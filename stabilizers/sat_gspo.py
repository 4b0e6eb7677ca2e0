"""SAT-GSPO: SAT on GSPO's sequence ratio (SAT paper Eq. 13-20 with the sequence ratio; methods.md "SAT").

Each response's mean log ratio against mu is broadcast to its tokens BEFORE the quantile, so
q is length-weighted; that same rho_b is the clipped ratio and the score d of the gate.
enabled=False (or q = 0) is GSPO (ratio against mu) bit for bit.
"""
from __future__ import annotations

import torch

from .api import LossOutput, PolicyBatch, register
from .surrogate import (check_clip, contracted_clip_loss, log_ratio, sat_contraction, sat_gate, tail_index,
                        sequence_log_ratio)


@register("sat_gspo")
def sat_gspo(
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
    log_rho = sequence_log_ratio(log_ratio(batch, ratio_against), batch.mask)
    magnitude = log_rho.detach().abs()
    q, index = sat_gate(magnitude, batch, alpha, quantile_scope)
    if not enabled:
        q = torch.zeros_like(q)
        index = tail_index(magnitude, batch.active, q)  # none
    c_plus, c_minus = sat_contraction(log_rho, q, index)
    out = contracted_clip_loss(batch, log_rho, q, index, c_plus, c_minus,
                               eps_low=eps_low, eps_high=eps_high, aggregation=aggregation)
    out.metrics["sat/scope_global"] = torch.tensor(float(quantile_scope == "global"))
    return out
