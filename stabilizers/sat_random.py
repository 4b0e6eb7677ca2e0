"""Random-tail contraction: a placebo for SAT (a control the SAT paper lacked).

SAT-GRPO's gate (paper Eq. 16-18) picks the tokens with |d| above the batch's alpha-quantile and
shrinks their clip interval by factors c_plus, c_minus. Here the same number of tokens is chosen
uniformly at random among the active ones (seeded), and they receive the very factors SAT computed
for its tail tokens, in random order. Same amount of contraction, no information about |d|: if
this matches SAT, SAT's gain is not its targeting.

The draw is a hash of (seed, token position), not a torch.Generator: the number of tokens drawn is
data (SAT's gate count), and a hash ranks every token with static shapes, on any device, with the
same result eager or compiled.
"""
from __future__ import annotations

import torch

from ._surrogate import contracted_clip_loss, log_ratio, sat_contraction, sat_gate
from .api import LossOutput, PolicyBatch, ranges, register

_MASK32 = 2**32 - 1


def random_keys(n: int, seed: int, device: torch.device) -> torch.Tensor:
    """n pseudo-random 32-bit keys, a function of (seed, position) only: a xorshift-multiply hash
    (Wellons' lowbias32 shape, multipliers below 2^31 so that int64 products never overflow)."""
    x = (torch.arange(n, dtype=torch.int64, device=device) + ((seed * 0x9E3779B1) & _MASK32)) & _MASK32
    for multiplier in (0x7FEB352D, 0x4C6CA68B):
        x = ((x ^ (x >> 16)) * multiplier) & _MASK32
    return x ^ (x >> 16)


@register("sat_random")
@ranges(eps_low="[0, 1)", eps_high="[0, inf)", alpha="(0, 1]")
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
    log_r = log_ratio(batch, ratio_against)
    q, sat_gated = sat_gate(log_r.detach().abs(), batch, alpha, quantile_scope)
    c_plus, c_minus = sat_contraction(log_r, q, sat_gated)
    active, gated = batch.active.reshape(-1), sat_gated.reshape(-1)
    # active tokens in random order (inactive ones last): the first m, m = SAT's gate count, are drawn
    keys = torch.where(active, random_keys(active.numel(), seed, active.device), 2**33)
    order = keys.argsort(stable=True)
    drawn = torch.arange(order.numel(), device=order.device) < gated.count_nonzero()
    # SAT's gated positions in flat order (gated first, by a stable sort): the j-th drawn token gets
    # the factors of SAT's j-th gated token
    tail_order = (~gated).to(torch.uint8).argsort(stable=True)

    def moved(c: torch.Tensor) -> torch.Tensor:
        values = torch.where(drawn, c.reshape(-1)[tail_order], 1.0)
        return torch.empty_like(values).scatter_(0, order, values).view_as(c)

    gate = torch.zeros_like(drawn).scatter_(0, order, drawn).view_as(batch.active)
    return contracted_clip_loss(batch, log_r, q, gate, moved(c_plus), moved(c_minus), eps_low=eps_low,
                                eps_high=eps_high, aggregation=aggregation, namespace="sat_random")
