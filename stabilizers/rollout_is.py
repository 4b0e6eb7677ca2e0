"""Rollout correction as in verl: sequence-level truncated IS and masked IS, weights that compose
with any loss (verl's rollout correction, ``rollout_is`` / ``rollout_rs``; Yao et al. 2025 "Your
efficient RL framework secretly brings you off-policy RL training"; beyond.md "Rollout correction").

    log rho_t = old_logp_t - log mu_t   (detached; clamped to [-20, 20] as verl does before exp)
    level "token":     log w_t = log rho_t
    level "sequence":  log w_i = clamp(sum over the response's active tokens of log rho_t, -20, 20),
                       broadcast to the response's tokens
    level "geometric": log w_i = mean over the response's active tokens of log rho_t (the geometric
                       mean token ratio), broadcast
    weight = 1[lower <= w <= upper] * min(w, cap)      (reweight=True)
             1[lower <= w <= upper]                    (reweight=False: rejection only)

``cap`` truncates (TIS; None = no truncation); ``lower``/``upper`` mask (MIS: weight 0 outside the
interval instead of truncating; None = that side open; lower None with upper set = 1 / upper,
verl's default). verl's sequence presets: truncation C = 2, and masking outside [0.5, 2].
Geo-RS (verl's rollout rejection with the ``seq_mean_k1`` statistic: the mean token log-ratio of a
response) rejects a response whose geometric-mean ratio leaves [0.999, 1.001] and weighs the kept
ones 1: level "geometric", lower 0.999, upper 1.001, reweight False (the `grpo_geo_rs` recipe);
with an infinite band it is no weight at all, its base loss bit for bit (x * 1.0 is exact).
Not a loss: a recipe's ``rollout_is`` switch multiplies the per-token objective by sg(weight),
after ``tis`` if both are set.

A rejected token (masked: weight 0) stays in the loss's denominator by default, AReaL's convention
(its ppo_actor_loss_fn counts the loss mask before rejection, so that masking does not inflate the
kept tokens' gradients). ``drop_rejected=True`` is verl's: rejection removes the tokens from the
response mask, so they leave the denominator and everything else the mask decides (SAT's
quantile, GSPO's per-response mean).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ._surrogate import masked_mean
from .api import PolicyBatch, check_range, ranges

LOG_CLAMP = 20.0


@ranges(level=("token", "sequence", "geometric"), cap="(0, inf) or None", lower="[0, upper] or None",
        upper="(0, inf] or None", reweight="bool", drop_rejected="bool")
def rollout_is_weight(batch: PolicyBatch, *, level: str = "sequence", cap: float | None = None,
                      lower: float | None = None, upper: float | None = None, reweight: bool = True,
                      drop_rejected: bool = False) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The detached [B, L] weight, the mask the loss then averages over (the batch's, or without the
    rejected tokens when ``drop_rejected``) and the diagnostics (namespace ``rollout_is/``)."""
    if upper is not None and lower is None:
        lower = 1.0 / upper  # verl's default; below upper only when upper >= 1
        check_range("lower", lower, 0.0, upper)
    active = batch.active
    log_rho = torch.where(active, batch.old_logp.detach() - batch.rollout_logp.detach(), 0.0)
    if level == "sequence":
        log_rho = log_rho.sum(-1, keepdim=True).expand_as(log_rho)
    elif level == "geometric":
        log_rho = (log_rho.sum(-1, keepdim=True) / active.sum(-1, keepdim=True).clamp(min=1)).expand_as(log_rho)
    raw = log_rho.clamp(-LOG_CLAMP, LOG_CLAMP).exp()
    keep = active
    if lower is not None:
        keep = keep & (raw >= lower)
    if upper is not None:
        keep = keep & (raw <= upper)
    truncated = raw if cap is None else raw.clamp(max=cap)
    weight = torch.where(keep, truncated if reweight else torch.ones_like(raw), 0.0)
    metrics = {
        "rollout_is/weight_mean": masked_mean(weight, active),
        "rollout_is/frac_masked": 1 - masked_mean(keep.to(raw.dtype), active),
    }
    if cap is not None:
        metrics["rollout_is/frac_capped"] = masked_mean((raw > cap).to(raw.dtype), active)
    return weight, torch.where(keep, batch.mask, 0) if drop_rejected else batch.mask, metrics


def with_rollout_is(batch: PolicyBatch, **spec) -> tuple[PolicyBatch, dict]:
    """``batch`` with its token weight multiplied by the rollout-correction weight (and its mask
    without the rejected tokens when ``drop_rejected``)."""
    weight, mask, metrics = rollout_is_weight(batch, **spec)
    if batch.token_weight is not None:
        weight = weight * batch.token_weight.detach()
    return replace(batch, token_weight=weight, mask=mask), metrics
