"""IPO with Score Centering, as prime-rl composes the two (IPOLossConfig.score_centering; Score
Centering: Marek & Ryabinin 2026, arXiv 2609.20807). This is IPO's loss (stabilizers/ipo.py). At every
active token, whether or not IPO keeps the sampled token, it subtracts the sampler-expected weighted
score. The weight of the score is IPO's own: the capped ratio inside the trust region, 0 outside it.

    cw_v = sg(q_v min(p_v / q_v, cap) 1[|p_v - q_v| <= eps])     (q = mu, p = pi over the vocabulary)
    loss = token-mean of  -A_t (keep_t c_t - sum_v cw_v log p_v)

Read in prime-rl's `IPOLoss.score_centering_loss` (PrimeIntellect-ai/prime-rl,
src/prime_rl/trainer/rl/loss.py). There the centering runs over the sampler's kept top-p/top-k set, with
the trainer's log-probs renormalised over that set (sampling-mask replay, prime-rl PR #3431). The tiny
engine samples from the whole vocabulary, so the set is the whole vocabulary here and the two agree.
An entry with q = 0 gets no mass, as prime-rl's `sampler.isfinite()` gives. The weight is computed in
log space: min(log p, log q + log cap), so that p / q never overflows.
"""
from __future__ import annotations

import math

from ._surrogate import aggregate, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register, sampler_field
from .ipo import ipo_objective, keep_band


@register("ipo_score_centering", needs=("sampler_logp",))
@ranges(eps="[0, 1]", max_importance_ratio="[1, inf]")
def ipo_score_centering(
    batch: PolicyBatch,
    *,
    eps: float = 0.3,
    max_importance_ratio: float = 1e4,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    logq = sampler_field(batch, "logq", "ipo_score_centering").detach()
    logp_all = sampler_field(batch, "logp", "ipo_score_centering")
    objective, _, metrics = ipo_objective(batch, eps, max_importance_ratio, 0.0, ratio_against)
    detached = logp_all.detach()
    in_band = keep_band(detached.exp(), logq.exp(), eps)
    mass = (detached.minimum(logq + math.log(max_importance_ratio))).exp()
    mass = mass.where(in_band, 0.0)
    objective = objective - batch.advantages * (mass * logp_all).sum(-1)
    metrics["ipo_score_centering/center_mass"] = masked_mean(mass.sum(-1), batch.active)
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
