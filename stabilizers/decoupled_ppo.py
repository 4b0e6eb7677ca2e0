"""AReaL's decoupled PPO: the clipped surrogate against the trainer's recompute, weighted by the
behaviour importance weight (Fu et al. 2025, AReaL, arXiv 2505.24298, Sec. "Decoupled PPO";
Hilton et al. 2021, arXiv 2110.00641, Eq. 5; beyond.md "AReaL decoupled PPO").

    rho_t = exp(old_logp_t - log mu_t)          (pi_old / mu, no gradient)
    loss  = token-mean of  -sg(rho_t) * M_t * min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
    M_t   = 1[rho_t <= behav_weight_cap]

Following AReaL's released code as beyond.md describes it (``behav_imp_weight_cap``, recommended
5.0; older versions had no cap, ``behav_weight_cap=None``; not re-checked here), the cap masks tokens
rather than truncating their weight, and the denominator keeps every active token. Optional dual clip as in grpo.
"""
from __future__ import annotations

import math

import torch

from .api import LossOutput, PolicyBatch, check_range, register
from .surrogate import aggregate, check_clip, clip_bounds, clip_metrics, clipped_objective, dual_clip, log_ratio


def behaviour_ratio(batch: PolicyBatch) -> torch.Tensor:
    """rho = pi_old / mu per token, detached (log-ratio clamped to [-20, 20] so exp stays finite)."""
    return (batch.old_logp.detach() - batch.rollout_logp.detach()).clamp(-20.0, 20.0).exp()


def weighted_clip_loss(batch: PolicyBatch, weight: torch.Tensor, *, eps_low: float, eps_high: float,
                       dual_clip_c: float | None, aggregation: str) -> LossOutput:
    """The clipped surrogate against old_logp (optionally dual-clipped) times a detached per-token
    ``weight``; with weight 1 everywhere it is grpo's loss bit for bit (x * 1.0 is exact)."""
    check_clip(eps_low, eps_high)
    ratio = torch.exp(log_ratio(batch, "old"))
    low, high = clip_bounds(eps_low, eps_high, ratio.dtype)
    objective = dual_clip(clipped_objective(ratio, batch.advantages, low, high), batch.advantages, dual_clip_c)
    return LossOutput(aggregate(objective * weight.detach(), batch, aggregation), clip_metrics(ratio, batch, low, high))


@register("decoupled_ppo")
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
        check_range("behav_weight_cap", behav_weight_cap, 0.0, math.inf, low_open=True, high_open=True)
        keep = keep & (rho <= behav_weight_cap)
    out = weighted_clip_loss(batch, torch.where(keep, rho, 0.0), eps_low=eps_low, eps_high=eps_high,
                             dual_clip_c=dual_clip_c, aggregation=aggregation)
    out.metrics.update(behaviour_metrics("decoupled_ppo", batch, rho, keep))
    return out


def behaviour_metrics(namespace: str, batch: PolicyBatch, rho: torch.Tensor, keep: torch.Tensor) -> dict:
    """Masked-token fraction, mean rho over active and over kept tokens, and the approximate
    KL(mu || pi_old) = E_mu[log mu - log pi_old] = -mean log rho, as detached 0-d tensors."""
    active = batch.active
    n_active = active.sum().clamp(min=1).to(rho.dtype)
    kept = keep & active
    log_rho = torch.where(active, batch.old_logp.detach() - batch.rollout_logp.detach(), 0.0)
    return {
        f"{namespace}/masked_frac": 1 - kept.sum().to(rho.dtype) / n_active,
        f"{namespace}/rho_mean": torch.where(active, rho, 0.0).sum() / n_active,
        f"{namespace}/kept_rho_mean": torch.where(kept, rho, 0.0).sum() / kept.sum().clamp(min=1).to(rho.dtype),
        f"{namespace}/approx_kl": -log_rho.sum() / n_active,
    }
