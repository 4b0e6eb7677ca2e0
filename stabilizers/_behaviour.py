"""The behaviour importance weight rho = pi_old / mu and the losses built on it (AReaL's decoupled
PPO, IcePop): a support module of decoupled_ppo.py and icepop.py, no stabilizer of its own."""
from __future__ import annotations

import torch

from ._surrogate import aggregate, clip_bounds, clip_metrics, clipped_objective, dual_clip, log_ratio
from .api import LossOutput, PolicyBatch


def behaviour_ratio(batch: PolicyBatch) -> torch.Tensor:
    """rho = pi_old / mu per token, detached (log-ratio clamped to [-20, 20] so exp stays finite)."""
    return (batch.old_logp.detach() - batch.rollout_logp.detach()).clamp(-20.0, 20.0).exp()


def weighted_clip_loss(batch: PolicyBatch, weight: torch.Tensor, *, eps_low: float, eps_high: float,
                       dual_clip_c: float | None, aggregation: str) -> LossOutput:
    """The clipped surrogate against old_logp (optionally dual-clipped) times a detached per-token
    ``weight``; with weight 1 everywhere it is grpo's loss bit for bit (x * 1.0 is exact)."""
    ratio = torch.exp(log_ratio(batch, "old"))
    low, high = clip_bounds(eps_low, eps_high, ratio)
    objective = dual_clip(clipped_objective(ratio, batch.advantages, low, high), batch.advantages, dual_clip_c)
    return LossOutput(aggregate(objective * weight.detach(), batch, aggregation), clip_metrics(ratio, batch, low, high))


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
