"""AReaL's decoupled PPO: the clipped surrogate against the trainer's recompute, weighted by the
behaviour importance weight (Fu et al. 2025, AReaL, arXiv 2505.24298, Sec. "Decoupled PPO";
Hilton et al. 2021, arXiv 2110.00641, Eq. 5; beyond.md "AReaL decoupled PPO").

    rho_t = exp(old_logp_t - log mu_t)          (pi_old / mu, no gradient)
    loss  = token-mean of  -sg(rho_t) * M_t * min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
    M_t   = 1[rho_t <= behav_weight_cap]

AReaL's code confirms the form (inclusionAI/AReaL areal/utils/functional/functional.py,
ppo_actor_loss_fn at commit 2274616): the clipped loss times pi_prox / pi_behave, and the
denominator is the loss mask's count taken BEFORE rejection ("mask mode would inflate per-token
gradients by N_original / N_kept"), so a masked token stays in it. There the cap has moved into
``rejection_sampling`` (action "mask", metric "ratio", ``upper``), which replaced
``behave_imp_weight_cap``; the value 5.0 is the one beyond.md reports as recommended and is not in
that code (older versions had no cap: ``behav_weight_cap=None``). Optional dual clip as in grpo.
"""
from __future__ import annotations

import torch

from ._behaviour import behaviour_metrics, behaviour_ratio, weighted_clip_loss
from .api import LossOutput, PolicyBatch, ranges, register


@register("decoupled_ppo")
@ranges(eps_low="[0, 1)", eps_high="[0, inf)", behav_weight_cap="(0, inf) or None", dual_clip_c="(1, inf) or None")
def decoupled_ppo(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    behav_weight_cap: float | None = 5.0,
    dual_clip_c: float | None = None,
    aggregation: str = "token_mean",
) -> LossOutput:
    rho = behaviour_ratio(batch)
    keep = batch.active
    if behav_weight_cap is not None:
        keep = keep & (rho <= behav_weight_cap)
    out = weighted_clip_loss(batch, torch.where(keep, rho, 0.0), eps_low=eps_low, eps_high=eps_high,
                             dual_clip_c=dual_clip_c, aggregation=aggregation)
    out.metrics.update(behaviour_metrics("decoupled_ppo", batch, rho, keep))
    return out
