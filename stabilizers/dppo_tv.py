"""DPPO-Binary-TV with a KL term, prime-rl's default loss ("DPPO+KL"; Qi et al. 2026, arXiv
2602.04879) until its PR #3418 made IPO the default (2026-08-27; stabilizers/ipo.py): mask a token
whose |pi - mu| at the sampled token exceeds delta in its advantage's direction, no ratio clip,
no IS cap, plus kl_coef (log pi - log mu)^2 on every token (the loss: stabilizers/_trust_region.py).

It follows prime-rl's code (PrimeIntellect-ai/prime-rl at 559b4477, src/prime_rl/trainer/rl/loss.py
``default_loss_fn``, defaults from packages/prime-rl-configs/src/prime_rl/configs/trainer.py
``DefaultLossConfig``): mask pi - mu > dppo_mask_high 0.2 where A > 0, pi - mu < -dppo_mask_low 0.2
where A <= 0; the policy term A pi/mu on kept tokens, uncapped; plus kl_tau 1e-3 (log pi - log mu)^2
on every token, against mu (the inference log-probs), no 1/2; each sequence's sum over the global
token count, i.e. token_mean. Where it differs from prime-rl: the policy term is sg(w) A log pi (the
same gradient as A pi/mu, another loss value), and log(pi/mu) is clamped at 20 before exp, as in
dppo_kl (prime-rl does not clamp; it matters only for a ratio above 5e8). Where prime-rl and the DPPO
paper differ, this follows prime-rl: the paper's recommended variant is Binary-TV too, but with
neither the KL term nor an uncapped ratio (DPPO's code caps it at 10).
"""
from __future__ import annotations

import math

from ._trust_region import binary_tv, trust_region_loss
from .api import LossOutput, PolicyBatch, ranges, register


@register("dppo_tv")
@ranges(delta_low="(0, inf]", delta_high="(0, inf]", kl_coef="[0, inf)")
def dppo_tv(
    batch: PolicyBatch,
    *,
    delta_low: float = 0.2,
    delta_high: float = 0.2,
    kl_coef: float = 1e-3,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    # prime-rl has no cap on pi / mu (the mask alone bounds the update)
    return trust_region_loss(batch, binary_tv, "dppo_tv", delta_low=delta_low, delta_high=delta_high,
                              ratio_cap=math.inf, kl_coef=kl_coef, ratio_against=ratio_against,
                              aggregation=aggregation)
