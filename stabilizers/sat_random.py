"""Random-tail contraction: a placebo for SAT (a control the SAT paper lacked).

SAT-GRPO's gate (paper Eq. 16-18) picks the tokens with |d| above the batch's alpha-quantile and
shrinks their clip interval by factors c_plus, c_minus. Here the same number of tokens is chosen
uniformly at random among the active ones (seeded), and they receive the very factors SAT computed
for its tail tokens, in random order. Same amount of contraction, no information about |d|: if
this matches SAT, SAT's gain is not its targeting.
"""
from __future__ import annotations

import torch

from .api import LossOutput, PolicyBatch, register
from .surrogate import (active_abs_values, check_clip, contracted_clip_loss, log_ratio, lower_quantile,
                        sat_contraction)


@register("sat_random")
def sat_random(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    alpha: float = 0.9,
    seed: int = 0,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    check_clip(eps_low, eps_high)
    log_r = log_ratio(batch, ratio_against)
    q = lower_quantile(active_abs_values(log_r, batch, "microbatch"), alpha)
    sat_gate, sat_plus, sat_minus = sat_contraction(log_r, batch.mask, q)

    active_index = batch.mask.bool().flatten().nonzero().squeeze(-1)
    generator = torch.Generator().manual_seed(seed)
    n_gated = int(sat_gate.sum())
    order = torch.randperm(len(active_index), generator=generator).to(active_index.device)
    chosen = active_index[order[:n_gated]]
    gate = torch.zeros(batch.mask.numel(), dtype=torch.bool, device=log_r.device)
    c_plus = torch.ones(batch.mask.numel(), dtype=log_r.dtype, device=log_r.device)
    c_minus = torch.ones_like(c_plus)
    gate[chosen] = True
    c_plus[chosen] = sat_plus.flatten()[sat_gate.flatten()]
    c_minus[chosen] = sat_minus.flatten()[sat_gate.flatten()]
    shape = batch.mask.shape
    return contracted_clip_loss(batch, log_r, gate.view(shape), c_plus.view(shape), c_minus.view(shape), q,
                                eps_low=eps_low, eps_high=eps_high, aggregation=aggregation,
                                namespace="sat_random")
