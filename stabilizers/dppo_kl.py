"""DPPO-Binary-KL as DPPO's own code runs it (Qi et al. 2026, arXiv 2602.04879; sail-sg/Stable-RL
verl/trainer/ppo/core_algos.py, loss mode ``dppo_binary_kl``): mask a token whose binary KL
D = q log(q / p) + (1 - q) log((1 - q) / (1 - p)) between mu and pi at the sampled token exceeds
delta in its advantage's direction; no ratio clip (the loss: stabilizers/_trust_region.py).

dppo_kl's defaults are DPPO's: delta 0.05 on both sides (verl's
examples/dppo_trainer/run_qwen30b_dppo.sh, LOSS_MODE=dppo_kl), the ratio against the rollout
policy (that script's bypass_mode, "recommended"), and the IS cap 10 (Stable-RL's clip_ratio_c
default; verl's script sets 10000, no cap). That script also uses Dr.GRPO's aggregation and
advantages; here ``aggregation`` stays token_mean, the bench's common ground. kl_coef > 0 adds
prime-rl's KL term to DPPO's KL mask (no source runs that pairing; no recipe sets it). With both
deltas infinite the mask keeps everything and the loss is CISPO against mu with [0, ratio_cap]
(eps_low 1, eps_high ratio_cap - 1), bit for bit.
"""
from __future__ import annotations

from ._trust_region import binary_kl, trust_region_loss
from .api import LossOutput, PolicyBatch, ranges, register


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
    return trust_region_loss(batch, binary_kl, "dppo_kl", delta_low=delta_low, delta_high=delta_high,
                              ratio_cap=ratio_cap, kl_coef=kl_coef, ratio_against=ratio_against,
                              aggregation=aggregation)
