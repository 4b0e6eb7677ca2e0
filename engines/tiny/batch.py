"""What a tiny-engine trainer step derives from its batch: the seeds of its draws, GRPO's group
advantages, the routing mismatch, and the batch as the trainer sees it before its update."""
from __future__ import annotations

from dataclasses import dataclass

import torch


def step_seed(seed: int, step: int, stream: int) -> int:
    """A distinct, stable seed per (run seed, step, purpose)."""
    return (seed * 1_000_003 + step) * 8 + stream


def group_advantages(rewards: torch.Tensor, samples: int, *, std_normalization: bool = True) -> torch.Tensor:
    """GRPO advantages (Shao et al. 2024): reward minus its prompt group's mean, over the group's
    std (+1e-6). ``std_normalization=False`` is Dr.GRPO's (arXiv 2503.20783, Sec. 3.1): the
    division by the std weights a group by how little its rewards differ, so it is left out."""
    groups = rewards.view(-1, samples)
    adv = groups - groups.mean(1, keepdim=True)
    if std_normalization:
        adv = adv / (groups.std(1, unbiased=False, keepdim=True) + 1e-6)
    return adv.reshape(-1)


def routing_mismatch(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of (position, layer) whose expert sets differ; [B, T, layers, k] each."""
    return float((a.sort(-1).values != b.sort(-1).values).any(-1).float().mean())


@dataclass(frozen=True)
class Recomputed:
    """A batch as the trainer sees it before its update (Trainer.recompute)."""

    plen: int  # prompt length: response position t is predicted at input position plen - 1 + t
    inputs: torch.Tensor
    response: torch.Tensor
    replay: torch.Tensor | None  # the routing the update replays: the engine's (R3) or the recompute's (R2)
    logmu: torch.Tensor  # the sampler's log-probabilities of the sampled tokens
    logp_full: torch.Tensor  # the trainer's log-softmax over the vocabulary
    old_logp: torch.Tensor
    ref_logp: torch.Tensor | None  # the base model's, when the KL term is on
    routing: torch.Tensor  # the trainer's routing (replayed or not)
    own_routing: torch.Tensor  # the trainer's own routing choice
