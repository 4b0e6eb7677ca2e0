"""What a tiny-engine trainer step derives from its batch: the seeds of its draws, GRPO's group
advantages, the routing mismatch, the batch as the trainer sees it before its update, and the
step's metrics row."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from engines.mismatch import abs_d_stats
from harness.engine import merge_metrics
from stabilizers import offpolicy_diagnostics

if TYPE_CHECKING:
    from .rollout import Rollout


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
    first_logits: torch.Tensor  # the update's first minibatch's forward, with its graph (Trainer.recompute)


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every value is finite, in one check for all tensors (not one per tensor): a tensor's
    max |x| is finite iff all of it is (a NaN propagates through the max)."""
    return bool(torch.stack(torch._foreach_norm(tensors, math.inf)).isfinite().all())


def clip_grad_norm(params: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_'s total 2-norm and clipping for CPU float32 gradients, in its ops
    (torch 2.13: per-tensor norms by _foreach_norm, the norm of their stack, grads times
    min(max_norm / (norm + 1e-6), 1)), without its per-tensor device moves; the multiplication by 1.0
    that max_norm None (inf) would make changes no value, so it is left out."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def as_floats(lists: dict[str, list[torch.Tensor]]) -> dict[str, list[float]]:
    """Each list's floating-point 0-d tensors as Python floats, read in one transfer (one host sync, not
    one per value): float(t) of each, since torch.stack's promotion among floating types is exact."""
    values = [value for values in lists.values() for value in values]
    floats = iter(torch.stack(values).tolist() if values else [])
    return {key: [next(floats) for _ in values] for key, values in lists.items()}


def response_lengths(mask: torch.Tensor) -> dict:
    """The sampled responses' lengths in tokens to <eos> (the response mask's row sums), their mean and maximum: what
    verl and TRL log per step. Read-only on the mask, so it changes no other number of the run."""
    lengths = mask.sum(-1)
    return {"length/mean": float(lengths.mean()), "length/max": float(lengths.max())}


def step_metrics(batch: Rollout, recomputed: Recomputed, update: dict) -> dict:
    """The step's metrics row (keys in docs/design.md): reward, entropy, response length, the mismatch between
    the trainer's and the sampler's log-probabilities, routing, and the loss's own diagnostics."""
    mask, logmu, old_logp, logp_full = batch.mask, recomputed.logmu, recomputed.old_logp, recomputed.logp_full
    numbers, active = update["numbers"], batch.mask.bool()
    d = old_logp - logmu
    probs = logp_full.exp()
    tv = 0.5 * (probs - batch.logmu_full.exp()).abs().sum(-1)[active]
    row = {
        "reward": float(batch.rewards.mean()),
        "reward/exact": float(batch.exact.mean()),
        "entropy": float(-(probs * logp_full).sum(-1)[active].mean()),
        "grad_norm": sum(numbers["grad_norm"]) / len(numbers["grad_norm"]),
        "loss": sum(numbers["loss"]) / len(numbers["loss"]),
        **response_lengths(mask),
        **abs_d_stats(d.abs()[active]),
        "d/mean": float(d[active].mean()),
        "tv/mean": float(tv.mean()),
        "tv/p90": float(torch.quantile(tv.double(), 0.9)),
        # E_mu[|pi/mu - 1|] / 2 = TV(mu, pi): the estimate a cluster can make from sampled tokens only
        "tv/sampled_estimate": float(0.5 * (d.exp() - 1).abs()[active].mean()),
        "routing/mismatch_rate": routing_mismatch(recomputed.routing, batch.routing),
        "routing/own_mismatch_rate": routing_mismatch(recomputed.own_routing, batch.routing),
    }
    if batch.logp_sampler.numel():  # the sampler pass ran (RolloutEngine.rollout's sampler_pass)
        row["d/lag_mean_abs"] = float((old_logp - batch.logp_sampler)[active].abs().mean())
        row["d/impl_mean_abs"] = float((batch.logp_sampler - logmu)[active].abs().mean())
    for key in ("kl/k3", "vcpo/lr_scale"):  # only when the recipe uses them
        if numbers[key]:
            row[key] = sum(numbers[key]) / len(numbers[key])
    row.update({k: float(v) for k, v in offpolicy_diagnostics(old_logp, logmu, mask).items()})
    return merge_metrics(row, {k: sum(v) / len(v) for k, v in update["stabilizer"].items()})
