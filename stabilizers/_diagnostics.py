"""Off-policy diagnostics logged for every recipe on every engine: how far the sampling
distribution mu is from the trainer's pi_old on a batch (VCPO, Huang et al., arXiv 2602.17616,
reports the effective sample size as a collapse predictor; verl's rollout-correction metrics;
beyond.md "VCPO" and "Rollout correction").

With log rho_t = old_logp_t - log mu_t on active tokens and, per response i with an active token,
log w_i = sum_t log rho_t (w_i = prod_t rho_t, unclipped):

    offpolicy/ess          (sum_i w_i)^2 / (B sum_i w_i^2) in [1/B, 1]; in log space:
                           exp(2 logsumexp(log w) - logsumexp(2 log w) - log B), never overflows
    offpolicy/chi2_token   mean_t rho_t^2 - 1
    offpolicy/chi2_seq     mean_i w_i^2 - 1     (log w clamped to [-20, 20] before exp, as verl)
    offpolicy/k3_kl        mean_t (rho_t - log rho_t - 1), the k3 estimate of KL(mu || pi_old)
                           from tokens sampled by mu (Schulman 2020)

Pure torch, sync-free, detached 0-d tensors; a batch without active tokens gives ESS 1 and zeros.
"""
from __future__ import annotations

import math

import torch

LOG_CLAMP = 20.0


def offpolicy_diagnostics(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The diagnostics above for a [B, L] batch (responses x tokens)."""
    active = mask.bool()
    log_rho = torch.where(active, (old_logp.detach() - rollout_logp.detach()).double(), 0.0)
    n_tokens = active.sum().clamp(min=1)
    has_tokens = active.any(-1)
    n_seq = has_tokens.sum()
    log_w = torch.where(has_tokens, log_rho.sum(-1), -math.inf)  # responses without tokens drop out
    log_ess = 2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0) - n_seq.clamp(min=1).double().log()
    ess = log_ess.exp()
    rho = log_rho.clamp(-LOG_CLAMP, LOG_CLAMP).exp()
    w = torch.where(has_tokens, log_w.clamp(-LOG_CLAMP, LOG_CLAMP).exp(), 0.0)
    chi2_token = torch.where(active, rho.square(), 0.0).sum() / n_tokens - 1
    chi2_seq = w.square().sum() / n_seq.clamp(min=1) - 1
    k3 = torch.where(active, rho - log_rho - 1, 0.0).sum() / n_tokens
    values = {"ess": ess, "chi2_token": chi2_token, "chi2_seq": chi2_seq, "k3_kl": k3}
    return {f"offpolicy/{name}": torch.where(n_seq > 0, value, 1.0 if name == "ess" else 0.0)
            .to(old_logp.dtype) for name, value in values.items()}


def ess_lr_scale(ess: torch.Tensor, rho_base: float = 1.0) -> torch.Tensor:
    """VCPO's learning-rate factor for one optimizer step: sqrt(min(1, ess / rho_base)), with ess the
    normalised effective sample size above (beyond.md "VCPO"; rho_base 1.0 is its default)."""
    return (ess / rho_base).clamp(max=1.0).sqrt()
