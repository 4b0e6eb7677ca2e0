"""SAT-GRPO: the staleness-adaptive trust region on token ratios (SAT paper Eq. 13-20; methods.md "SAT").

d = sg(logp - log mu); q = lower inverse-CDF alpha-quantile of |d| over active tokens (this
micro-batch, as in the paper, or every rank's with quantile_scope="global"). A token is gated
when q > 0 and |d| > q; there eps_high shrinks by psi(max(d, 0); q) and eps_low by
psi(max(-d, 0); q), psi(u; q) = 1 / (1 + (u / q)^2). Then the usual clipped surrogate with
r = exp(logp - log mu). enabled=False (or q = 0) is the fixed-clip loss bit for bit.
"""
from __future__ import annotations

from ._surrogate import log_ratio, sat_loss
from .api import LossOutput, PolicyBatch, ranges, register


@register("sat_grpo")
@ranges(eps_low="[0, 1)", eps_high="[0, inf)", alpha="(0, 1]", enabled="bool")
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
    return sat_loss(batch, log_ratio(batch, ratio_against), eps_low=eps_low, eps_high=eps_high, alpha=alpha,
                    quantile_scope=quantile_scope, enabled=enabled, aggregation=aggregation)
