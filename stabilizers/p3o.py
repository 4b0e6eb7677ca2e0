"""P3O, the batch-ESS adaptive objective ("Trust the Batch, On- or Off-Policy: Adaptive Policy
Optimization for RL Post-Training", Fakoor, Aubry, Stranges, Smola; arXiv 2605.12380v1). The paper's
own text was not readable here: the formulas are the authors' blog post (FeynRL-project/
feynrl-project.github.io blogs/episode_two.md @4830e4a, "The Fix: Measure, Don't Guess", the display
equations for rho_t, e_B and L_P3O) and the authors' code (FeynRL-project/FeynRL algs/P3O/p3o.py
@2dbc6be, compute_policy_loss and calculate_ess; algs/RL/common.py, compute_kl_distance). Equation
numbers of the paper: not available.

    rho_t = exp(logp_t - ref_t)                     (ref = log mu: FeynRL's old_logprobs are the rollout engine's)
    e_B   = (sum rho)^2 / (n sum rho^2)              over the n active tokens of the batch, in [1/n, 1]
    k_t   = (logp_t - ref_t) + exp(clamp(ref_t - logp_t, -10, 10)) - 1      (the code's KL(pi || pi_b) per token)
    loss  = token-mean of  -sg(min(rho_t, e_B)) A_t logp_t  +  (1 - e_B) token-mean of k_t

The one statistic e_B caps the score-function weight (no clip range) and weighs the KL pull back to
the behaviour policy: on fresh data e_B ~ 1 (cap ~ 1, no KL), on stale or mismatched data it falls.
No hyper-parameter: the loss has none but the bench's conventions. e_B is detached (the code reads it
on the host); here it stays a tensor (no sync). Across data-parallel ranks the code all-reduces the
sums, as this loss does through ``batch.reduce`` when an engine passes one. The code's +1e-8 in
e_B's denominator is left out (an empty batch gives e_B = 1, the code's guard), and so are its
optional entropy bonus and reference-model KL (an engine's terms, not P3O's).
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register

_KL_EXP_CLAMP = 10.0  # the code clamps log(pi_b / pi) to [-10, 10] before exp


def batch_ess(ratio: torch.Tensor, batch: PolicyBatch) -> torch.Tensor:
    """e_B = (sum w)^2 / (n sum w^2) over the active tokens (every rank's with batch.reduce), detached; 1 with none."""
    w = torch.where(batch.active, ratio.detach(), 0.0).to(torch.float64)
    sums = torch.stack([w.sum(), w.square().sum(), batch.active.count_nonzero().to(torch.float64)])
    if batch.reduce is not None:
        sums = torch.stack(batch.reduce.all_gather(sums)).sum(0)
    total, total_sq, n = sums.unbind()
    ess = total.square() / (n * total_sq).clamp(min=torch.finfo(torch.float64).tiny)
    return torch.where(n > 0, ess, 1.0).to(ratio.dtype)


@register("p3o")
@ranges()
def p3o(
    batch: PolicyBatch,
    *,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    reference = reference_logp(batch, ratio_against)
    log_r = torch.where(batch.active, batch.logp - reference, 0.0)  # the code zeroes padding before exp
    ratio = log_r.detach().exp()
    ess = batch_ess(ratio, batch)
    weight = torch.minimum(ratio, ess)
    kl = log_r + (reference - batch.logp).clamp(-_KL_EXP_CLAMP, _KL_EXP_CLAMP).exp() - 1
    objective = weight * batch.advantages * batch.logp - (1 - ess) * kl
    metrics = {
        "p3o/ess": ess.clone(),
        "p3o/frac_capped": masked_mean((ratio > ess).to(ratio.dtype), batch.active),
        "p3o/kl_behaviour": masked_mean(kl.detach(), batch.active),
        "ratio/mean": masked_mean(ratio, batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
