"""DPPO's trust region as two codes run it: a mask on how far pi moved from mu at the sampled token,
no ratio clip (Qi et al. 2026, arXiv 2602.04879). ``dppo_kl`` is DPPO-Binary-KL as DPPO's own code
runs it (sail-sg/Stable-RL verl/trainer/ppo/core_algos.py, loss mode ``dppo_binary_kl``); ``dppo_tv``
is DPPO-Binary-TV with a KL term, prime-rl's default loss ("DPPO+KL"). The SAT paper's DPPO
(stabilizers/dppo.py) is another thing: a TV mask on top of PPO's clip.

    p_t = pi(y_t), q_t = ref(y_t)                          (ref = mu by default, detached)
    D_t = q log(q / p) + (1 - q) log((1 - q) / (1 - p))    (dppo_kl; 1e-8 in the second log, as DPPO's code has it)
    D_t = |p - q|                                          (dppo_tv: the binary TV distance)
    M_t = 0 if A_t > 0, p > q and D_t > delta_high, or A_t <= 0, p < q and D_t > delta_low; else 1
    w_t = sg(min(exp(logp_t - ref_t), ratio_cap))
    loss = token-mean of  -M_t w_t A_t logp_t  +  kl_coef (logp_t - ref_t)^2

The mask keeps a token unless the update would push it further out of the region in the direction
its advantage asks for. The KL term counts on every token, masked or not.

dppo_kl's defaults are DPPO's: delta 0.05 on both sides (verl's
examples/dppo_trainer/run_qwen30b_dppo.sh, LOSS_MODE=dppo_kl), the ratio against the rollout
policy (that script's bypass_mode, "recommended"), and the IS cap 10 (Stable-RL's clip_ratio_c
default; verl's script sets 10000, no cap). That script also uses Dr.GRPO's aggregation and
advantages; here ``aggregation`` stays token_mean, the bench's common ground. kl_coef > 0 adds
prime-rl's KL term to DPPO's KL mask (no source runs that pairing; no recipe sets it). With both
deltas infinite the mask keeps everything and the loss is CISPO against mu with [0, ratio_cap]
(eps_low 1, eps_high ratio_cap - 1), bit for bit.

dppo_tv follows prime-rl's code (PrimeIntellect-ai/prime-rl at 559b4477, src/prime_rl/trainer/rl/loss.py
``default_loss_fn``, defaults from packages/prime-rl-configs/src/prime_rl/configs/trainer.py
``DefaultLossConfig``): mask pi - mu > dppo_mask_high 0.2 where A > 0, pi - mu < -dppo_mask_low 0.2
where A <= 0; the policy term A pi/mu on kept tokens, uncapped; plus kl_tau 1e-3 (log pi - log mu)^2
on every token, against mu (the inference log-probs), no 1/2; each sequence's sum over the global
token count, i.e. token_mean. Where it differs from prime-rl: the policy term is sg(w) A log pi (the
same gradient as A pi/mu, another loss value), and log(pi/mu) is clamped at 20 before exp, as in
dppo_kl (prime-rl does not clamp; it matters only for a ratio above 5e8). Where prime-rl and the DPPO
paper differ, this follows prime-rl: the paper's recommended variant is Binary-TV too, but with
neither the KL term nor an uncapped ratio (DPPO's code caps it at 10).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._surrogate import aggregate, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register

_EPS = 1e-8  # DPPO's code: keeps log((1 - q) / (1 - p)) finite at p or q = 1
_LOG_CLAMP = 20.0  # DPPO's code clamps log(pi / mu) at 20 before exp


def _binary_kl(p: torch.Tensor, q: torch.Tensor, logp: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return q * (log_q - logp) + (1 - q) * torch.log((1 - q + _EPS) / (1 - p + _EPS))


def _binary_tv(p: torch.Tensor, q: torch.Tensor, logp: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return (p - q).abs()


def _trust_region_loss(batch: PolicyBatch, divergence_of: Callable, name: str, *, delta_low: float,
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


@register("dppo_kl")
@ranges(delta_low="(0, inf]", delta_high="(0, inf]", ratio_cap="(0, inf]", kl_coef="[0, inf)")
def dppo_kl(
    batch: PolicyBatch,
    *,
    delta_low: float = 0.05,
    delta_high: float = 0.05,
    ratio_cap: float = 10.0,
    kl_coef: float = 0.0,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    return _trust_region_loss(batch, _binary_kl, "dppo_kl", delta_low=delta_low, delta_high=delta_high,
                              ratio_cap=ratio_cap, kl_coef=kl_coef, ratio_against=ratio_against,
                              aggregation=aggregation)


@register("dppo_tv")
@ranges(delta_low="(0, inf]", delta_high="(0, inf]", kl_coef="[0, inf)")
def dppo_tv(
    batch: PolicyBatch,
    *,
    delta_low: float = 0.2,
    delta_high: float = 0.2,
    kl_coef: float = 1e-3,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    # prime-rl has no cap on pi / mu (the mask alone bounds the update)
    return _trust_region_loss(batch, _binary_tv, "dppo_tv", delta_low=delta_low, delta_high=delta_high,
                              ratio_cap=math.inf, kl_coef=kl_coef, ratio_against=ratio_against,
                              aggregation=aggregation)
