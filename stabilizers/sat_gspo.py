"""SAT-GSPO: SAT on GSPO's sequence ratio (SAT paper Eq. 13-20 with the sequence ratio; methods.md "SAT").

Each response's mean log ratio against mu is broadcast to its tokens BEFORE the quantile, so
q is length-weighted; that same rho_b is the clipped ratio and the score d of the gate.
enabled=False (or q = 0) is GSPO against mu (the `gspo_mu` recipe) bit for bit. Aggregation:
one weight per response, as GSPO (stabilizers/gspo.py) and the SAT paper's Eq. 38.
"""
from __future__ import annotations

from ._surrogate import log_ratio, sat_loss, sequence_log_ratio
from .api import LossOutput, PolicyBatch, ranges, register


@register("sat_gspo")
@ranges(eps_low="[0, 1)", eps_high="[0, inf)", alpha="(0, 1]", enabled="bool")
def sat_gspo(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    alpha: float = 0.9,
    quantile_scope: str = "microbatch",
    ratio_against: str = "rollout",
    enabled: bool = True,
    aggregation: str = "sample_mean",
) -> LossOutput:
    log_rho = sequence_log_ratio(log_ratio(batch, ratio_against), batch.active)
    return sat_loss(batch, log_rho, eps_low=eps_low, eps_high=eps_high, alpha=alpha,
                    quantile_scope=quantile_scope, enabled=enabled, aggregation=aggregation)
