"""SAT with a fixed absolute threshold: a control the SAT paper lacked.

Identical to SAT-GRPO (paper Eq. 16-20) except that q is the constant `threshold` instead of the
batch's alpha-quantile of |d|. It asks whether SAT's adaptivity matters or only where its gate
sits. threshold = 0 disables the gate (the fixed-clip loss bit for bit).
"""
from __future__ import annotations

import torch

from ._surrogate import contracted_clip_loss, log_ratio, sat_contraction, tail_gate
from .api import LossOutput, PolicyBatch, ranges, register


@register("sat_fixed")
@ranges(threshold="[0, inf)", eps_low="[0, 1)", eps_high="[0, inf)")
def sat_fixed(
    batch: PolicyBatch,
    *,
    threshold: float = 0.05,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_r = log_ratio(batch, ratio_against)
    q = torch.full((), threshold, dtype=log_r.dtype, device=log_r.device)  # a fill on the device, no copy
    gate = tail_gate(log_r.detach().abs(), batch.active, q)
    c_plus, c_minus = sat_contraction(log_r, q, gate)
    return contracted_clip_loss(batch, log_r, q, gate, c_plus, c_minus,
                                eps_low=eps_low, eps_high=eps_high, aggregation=aggregation)
