"""DPPO-TV as the SAT paper ran it: mask tokens whose probability moved more than delta away from
mu, on top of PPO's ratio clip (Qi et al. 2026; the SAT paper's DPPO baseline; methods.md "DPPO").

r = exp(logp - log mu), M = 1[sign(A (r - 1)) <= 0  or  |pi - mu| <= delta] (detached), and the
loss is the GRPO clipped surrogate times M. The SAT paper used delta = 1e-3; public references
use far looser values (0.15), so delta stays a parameter.

Which DPPO this is: the SAT paper's variant, PPO's clip x the TV mask. DPPO's own code
(sail-sg/Stable-RL) has no ratio clip (the mask alone is the trust region) and caps the IS ratio
at 10: eps_low / eps_high here cannot switch the clip off (eps_low < 1), so that form is not a
parameter setting of this module.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, clip_bounds, clip_metrics, clipped_objective, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register


@register("dppo")
@ranges(delta="(0, inf)", eps_low="[0, 1)", eps_high="[0, inf)")
def dppo(
    batch: PolicyBatch,
    *,
    delta: float = 1e-3,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    reference = reference_logp(batch, ratio_against)
    ratio = torch.exp(batch.logp - reference)
    low, high = clip_bounds(eps_low, eps_high, ratio)
    inward = batch.advantages * (ratio.detach() - 1) <= 0
    close = (batch.logp.detach().exp() - reference.exp()).abs() <= delta
    keep = (inward | close).to(ratio.dtype)
    objective = clipped_objective(ratio, batch.advantages, low, high) * keep
    metrics = clip_metrics(ratio, batch, low, high)
    metrics["dppo/mask_rate"] = 1 - masked_mean(keep, batch.active)
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
