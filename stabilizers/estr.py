"""ESTR, the entropy-scaled trust region (Zhao et al. 2026, "Deconstructing Off-Policy Ratios:
Entropy-Scaled Trust Regions for Asynchronous RL", arXiv 2607.22186). THIRD-PARTY SOURCE: neither the
paper nor its code was read; the rule is that of three independent reading notes (a Chinese deep
read, a Japanese note, a Chinese daily digest), which agree with one another.

    delta_t = log pi(y_t) - log mu(y_t)
    H_t     = -sum_v mu(v) log mu(v)                    (the sampler's entropy: PolicyBatch.sampler.entropy)
    M_t     = 1[delta_t^2 / (H_t + entropy_eps) <= tau] (detached)
    loss    = token-mean of  -M_t min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t),  r = pi / mu

Masked tokens stay in the denominator. entropy_eps 0.01 is the Japanese note's. tau: NO SOURCE
DEFAULT (the notes say only that an appendix gives its sensitivity), so it is tuned under the equal
tuning budget; 1.0 (|delta| <= 1 at an entropy of 1 nat, <= 0.1 at 0) is this bench's starting point,
not the paper's. The clip 0.2 / 0.2 is GRPO's: the notes write the clip without values. With tau = inf
it is grpo against mu bit for bit.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, clip_bounds, clip_metrics, clipped_objective, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register, sampler_field


@register("estr", needs=("sampler_entropy",))
@ranges(tau="(0, inf]", entropy_eps="(0, inf)", eps_low="[0, 1)", eps_high="[0, inf)")
def estr(
    batch: PolicyBatch,
    *,
    tau: float = 1.0,
    entropy_eps: float = 0.01,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    entropy = sampler_field(batch, "entropy", "estr").detach()
    log_r = log_ratio(batch, ratio_against)
    score = log_r.detach().square() / (entropy + entropy_eps)
    keep = score <= tau
    ratio = torch.exp(log_r)
    low, high = clip_bounds(eps_low, eps_high, ratio)
    objective = torch.where(keep, clipped_objective(ratio, batch.advantages, low, high), 0.0)
    metrics = clip_metrics(ratio, batch, low, high)
    metrics.update({
        "estr/masked_frac": masked_mean((~keep).to(ratio.dtype), batch.active),  # the notes' rho_mask
        "estr/score_mean": masked_mean(score, batch.active),
        "estr/entropy_mean": masked_mean(entropy, batch.active),
    })
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
