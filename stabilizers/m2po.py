"""M2PO: a second-moment trust region that masks the few tokens with extreme log-ratios
(Zheng, Zhao, Chen 2025, arXiv 2510.01161, Algorithm 1; code Infini-AI-Lab/M2PO; beyond.md "M2PO").

    log w_t = logp_t - ref_t  (ref = log mu by default: staleness and engine mismatch, w = pi / mu)
    M2_t    = (log w_t)^2, detached
    trust-region tokens: (A_t > 0 and w_t > 1) or (A_t < 0 and w_t < 1)  (the released code's set)
    mask    Algorithm 1: remove the trust-region token with the largest M2_t until the mean M2 of
            the remaining trust-region tokens is <= tau; other tokens are never masked
    loss    token-mean over all active tokens of  -M_t w_t A_t  (no epsilon clip: the mask replaces it)

The mean is over trust-region tokens, as in the released code (verl/trainer/ppo/core_algos.py,
commit 4514ce2: budget ``KL2_budget x token_num`` over those tokens, checked here). The set and the
denominator are confirmed by the paper's final version (ICLR 2026, openreview IIgl5MWelz) as
agentscope-ai/Trinity-RFT PR #615 (2026-08-20) implements it: "constrain only active PPO trust-region
quadrants: A>0 with ratio>1 or A<0 with ratio<1; paper default tau = 0.04; preserve the original
valid-token denominator" (a third-party excerpt of the PR; the final paper itself was not read).
The released code then caps |log w| at a
shared threshold (a capped mean) instead of masking; this module implements Algorithm 1's greedy
mask. tau = 0.04 is the paper's default.

Sync-free and shape-static: the greedy loop is a sort by M2 (descending, other tokens last), a
cumulative sum giving the mean after removing the top k for every k, and the first k whose mean is
<= tau (argmax of a boolean; k = all trust-region tokens always qualifies, the empty mean being 0).
Removing the largest value never raises the mean, so that k is Algorithm 1's stopping point.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


def greedy_m2_mask(m2: torch.Tensor, candidate: torch.Tensor, tau: float) -> torch.Tensor:
    """Algorithm 1's removed tokens (bool, shape of m2): the fewest largest-M2 candidates whose removal
    brings the candidates' mean M2 to <= tau. Computed in float64 so the cut is exact on ties."""
    flat = torch.where(candidate, m2.double(), -1.0).reshape(-1)  # M2 >= 0 > -1: candidates sort first
    values, order = flat.sort(descending=True)
    removed_sum = torch.cat([values.new_zeros(1), torch.where(values >= 0, values, 0.0).cumsum(0)])
    n = candidate.sum().double()
    remaining = n - torch.arange(values.numel() + 1, dtype=torch.float64, device=m2.device)
    mean_after = (removed_sum[-1] - removed_sum) / remaining.clamp(min=1)
    k = ((mean_after <= tau) | (remaining <= 0)).int().argmax()  # the first k that satisfies the budget
    removed_sorted = torch.arange(values.numel(), device=m2.device) < k
    return torch.zeros_like(removed_sorted).scatter(0, order, removed_sorted).view_as(m2)


@register("m2po")
@ranges(tau="[0, inf]")
def m2po(
    batch: PolicyBatch,
    *,
    tau: float = 0.04,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_w = log_ratio(batch, ratio_against)
    lw = log_w.detach()
    m2 = lw.square()
    advantages = batch.advantages
    candidate = batch.active & (((advantages > 0) & (lw > 0)) | ((advantages < 0) & (lw < 0)))
    removed = greedy_m2_mask(m2, candidate, tau)
    objective = torch.where(removed, 0.0, torch.exp(log_w) * advantages)
    kept = candidate & ~removed
    metrics = {
        "m2po/m2": masked_mean(m2, batch.active),
        "m2po/m2_trust_region": masked_mean(m2, candidate),
        "m2po/m2_trust_region_after": masked_mean(m2, kept),
        "m2po/masked_frac": masked_mean(removed.to(m2.dtype), batch.active),
        "ratio/mean": masked_mean(lw.exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
