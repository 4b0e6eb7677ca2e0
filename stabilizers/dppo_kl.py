"""DPPO-Binary-KL as DPPO's own code runs it: a trust region on the binary KL divergence between mu and
pi at the sampled token, with no ratio clip (Qi et al. 2026, arXiv 2602.04879; sail-sg/Stable-RL
verl/trainer/ppo/core_algos.py, loss mode ``dppo_binary_kl``). The SAT paper's DPPO (stabilizers/dppo.py)
is another thing: a TV mask on top of PPO's clip.

    p_t = pi(y_t), q_t = ref(y_t)                          (ref = mu by default, detached)
    D_t = q log(q / p) + (1 - q) log((1 - q) / (1 - p))    (1e-8 in the second log, as the code has it)
    M_t = 0 if A_t > 0, p > q and D_t > delta_high, or A_t <= 0, p < q and D_t > delta_low; else 1
    w_t = sg(min(exp(logp_t - ref_t), ratio_cap))
    loss = token-mean of  -M_t w_t A_t logp_t  +  kl_coef (logp_t - ref_t)^2

The mask keeps a token unless the update would push it further out of the region in the direction
its advantage asks for. Defaults are DPPO's: delta 0.05 on both sides (verl's
examples/dppo_trainer/run_qwen30b_dppo.sh, LOSS_MODE=dppo_kl), the ratio against the rollout
policy (that script's bypass_mode, "recommended"), and the IS cap 10 (Stable-RL's clip_ratio_c
default; verl's script sets 10000, no cap). That script also uses Dr.GRPO's aggregation and
advantages; here ``aggregation`` stays token_mean, the bench's common ground.

kl_coef > 0 is DPPO+KL, prime-rl's form: its loss adds kl_tau (log pi / mu)^2 per token. Its
default tau was not confirmed against prime-rl's code here, so no recipe sets one. With both
deltas infinite the mask keeps everything and the loss is CISPO against mu with [0, ratio_cap]
(eps_low 1, eps_high ratio_cap - 1), bit for bit.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register

_EPS = 1e-8  # DPPO's code: keeps log((1 - q) / (1 - p)) finite at p or q = 1
_LOG_CLAMP = 20.0  # DPPO's code clamps log(pi / mu) at 20 before exp


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
    reference = reference_logp(batch, ratio_against)
    log_r = batch.logp - reference
    # A log-prob a hair above 0 (an engine's rounding) would put 1 - q below 0 and the log at NaN.
    p, q = batch.logp.detach().exp().clamp(max=1.0), reference.exp().clamp(max=1.0)
    divergence = q * (reference - batch.logp.detach()) + (1 - q) * torch.log((1 - q + _EPS) / (1 - p + _EPS))
    positive = batch.advantages > 0
    outside = torch.where(positive, (divergence > delta_high) & (p > q), (divergence > delta_low) & (p < q))
    weight = log_r.detach().clamp(max=_LOG_CLAMP).exp().clamp(max=ratio_cap)
    objective = torch.where(outside, 0.0, weight * batch.advantages * batch.logp)
    if kl_coef:  # a Python float: the term is in the graph only when asked for
        objective = objective - kl_coef * log_r.square()
    metrics = {
        "dppo_kl/masked_frac": masked_mean(outside.to(p.dtype), batch.active),
        "dppo_kl/divergence_mean": masked_mean(divergence, batch.active),
        "ratio/mean": masked_mean(log_r.detach().exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
