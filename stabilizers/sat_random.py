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
from .surrogate import check_clip, contracted_clip_loss, log_ratio, sat_contraction, sat_gate


@register("sat_random")
def sat_random(
    batch: PolicyBatch,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    alpha: float = 0.9,
    seed: int = 0,
    quantile_scope: str = "microbatch",
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    check_clip(eps_low, eps_high)
    log_r = log_ratio(batch, ratio_against)
    magnitude = log_r.detach().abs()
    q, sat_index = sat_gate(magnitude, batch, alpha, quantile_scope)
    c_plus, c_minus = sat_contraction(log_r, q, sat_index)
    active_index = batch.active.reshape(-1).nonzero().squeeze(-1)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(active_index.numel(), generator=generator)[: sat_index.numel()]
    index = active_index[order.to(active_index.device)]
    return contracted_clip_loss(batch, log_r, q, index, c_plus, c_minus, eps_low=eps_low, eps_high=eps_high,
                                aggregation=aggregation, namespace="sat_random")
