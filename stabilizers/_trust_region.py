"""DPPO's trust region, the loss its two variants share (dppo_kl.py, dppo_tv.py): a mask on how far
pi moved from mu at the sampled token, no ratio clip (Qi et al. 2026, arXiv 2602.04879). ``dppo_kl`` is DPPO-Binary-KL as DPPO's own code
runs it (sail-sg/Stable-RL verl/trainer/ppo/core_algos.py, loss mode ``dppo_binary_kl``); ``dppo_tv``
is DPPO-Binary-TV with a KL term, prime-rl's default loss ("DPPO+KL") until its PR #3418 made IPO
the default. The SAT paper's DPPO (stabilizers/dppo.py) is another thing: a TV mask on top of
PPO's clip.

    p_t = pi(y_t), q_t = ref(y_t)                          (ref = mu by default, detached)
    D_t = q log(q / p) + (1 - q) log((1 - q) / (1 - p))    (dppo_kl; 1e-8 in the second log, as DPPO's code has it)
    D_t = |p - q|                                          (dppo_tv: the binary TV distance)
    M_t = 0 if A_t > 0, p > q and D_t > delta_high, or A_t <= 0, p < q and D_t > delta_low; else 1
    w_t = sg(min(exp(logp_t - ref_t), ratio_cap))
    loss = token-mean of  -M_t w_t A_t logp_t  +  kl_coef (logp_t - ref_t)^2

The mask keeps a token unless the update would push it further out of the region in the direction
its advantage asks for. The KL term counts on every token, masked or not.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ._surrogate import aggregate, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch

_EPS = 1e-8  # DPPO's code: keeps log((1 - q) / (1 - p)) finite at p or q = 1
_LOG_CLAMP = 20.0  # DPPO's code clamps log(pi / mu) at 20 before exp


def binary_kl(p: torch.Tensor, q: torch.Tensor, logp: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return q * (log_q - logp) + (1 - q) * torch.log((1 - q + _EPS) / (1 - p + _EPS))


def binary_tv(p: torch.Tensor, q: torch.Tensor, logp: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return (p - q).abs()


def trust_region_loss(batch: PolicyBatch, divergence_of: Callable, name: str, *, delta_low: float,
                       delta_high: float, ratio_cap: float, kl_coef: float, ratio_against: str,
                       aggregation: str) -> LossOutput:
    reference = reference_logp(batch, ratio_against)
    log_r = batch.logp - reference
    # A log-prob a hair above 0 (an engine's rounding) would put 1 - q below 0 and the log at NaN.
    p, q = batch.logp.detach().exp().clamp(max=1.0), reference.exp().clamp(max=1.0)
    divergence = divergence_of(p, q, batch.logp.detach(), reference)
    positive = batch.advantages > 0
    outside = torch.where(positive, (divergence > delta_high) & (p > q), (divergence > delta_low) & (p < q))
    weight = log_r.detach().clamp(max=_LOG_CLAMP).exp().clamp(max=ratio_cap)
    objective = torch.where(outside, 0.0, weight * batch.advantages * batch.logp)
    if kl_coef:  # a Python float: the term is in the graph only when asked for
        objective = objective - kl_coef * log_r.square()
    metrics = {
        f"{name}/masked_frac": masked_mean(outside.to(p.dtype), batch.active),
        f"{name}/divergence_mean": masked_mean(divergence, batch.active),
        "ratio/mean": masked_mean(log_r.detach().exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
