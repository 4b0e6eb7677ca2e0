"""A recipe's fingerprint: its loss, gradient and metrics on one canned batch, hashed.

A train job records the fingerprint of the recipe it runs when it starts; aggregate recomputes the
fingerprint of the recipe the run's config names and refuses the run when they differ. That catches
the failure users of other frameworks report (verl #4912, #4272; miles #1829): the configured
stabilizer is not the one that ran (a module that runs another loss, a parameter that never
reached it, an engine that swapped the loss).

The canned batch is fixed by formula (no random generator, so no torch version can change it):
float64, 5 responses of unequal lengths, advantages of both signs, and tokens placed so that
clips, caps, masks and gates fire: every recipe of recipes.yaml but the R3 twins and grpo_dr
(routing replay and Dr.GRPO's std-free advantages are engine switches, not losses) has its own loss
and gradient on it (tests/stabilizers/test_stabilizers_fingerprint.py). Values are rounded to 9 significant digits before hashing, so that a last-bit
difference between two machines' kernels does not count as another loss.
"""
from __future__ import annotations

import hashlib
import json
import math

import torch

from .api import PolicyBatch, SamplerDistribution, loss_needs
from .recipes import Recipe

CANNED_LENGTHS = (12, 8, 4, 10, 1)
CANNED_ADVANTAGES = (1.0, -0.5, 2.0, -1.5, 1.0)
_DIGITS = 9
_VOCAB = 6


def canned_batch(needs: tuple[str, ...] = ()) -> PolicyBatch:
    """The fixed batch every fingerprint is taken on (logp requires grad), with the sampler's
    distribution a loss ``needs`` (canned_sampler; none for the others, whose fingerprints it leaves alone).

    Small log-ratios everywhere (|log pi / pi_old|, |log pi_old / mu| <= 0.05 each), and placed
    tokens: log pi / mu = 1.0 with A > 0 (clipped by GRPO, masked by M2PO's tau 0.04), 0.16 and
    -0.17 (with it SAT-GRPO's tail at alpha 0.9: its contracted clip binds where GRPO's does not),
    a one-token response at 0.14 (SAT-GSPO's gated response), pi_old / mu ~ 9 (above the behaviour
    caps of decoupled PPO and IcePop, 5) and pi / pi_old ~ 3.7 with A < 0 (the dual clip, c = 3)."""
    b = torch.arange(len(CANNED_LENGTHS), dtype=torch.float64).unsqueeze(1)
    t = torch.arange(max(CANNED_LENGTHS), dtype=torch.float64).unsqueeze(0)
    rollout = -1.5 - 0.5 * torch.sin(1.3 * b + 0.7 * t)
    old = rollout + 0.05 * torch.sin(2.1 * b + 1.7 * t + 0.5)
    logp = old + 0.05 * torch.cos(0.9 * b + 2.3 * t)
    for (row, column), log_ratio in {(0, 7): 1.0, (2, 1): 0.16, (1, 0): -0.17, (4, 0): 0.14}.items():
        logp[row, column] = rollout[row, column] + log_ratio
    old[1, 2] += 2.2  # pi_old / mu ~ 9 (pi / mu unchanged)
    logp[3, 1] += 1.3  # pi / pi_old ~ 3.7 with A < 0 ...
    rollout[3, 1] += 1.3  # ... and pi / mu unchanged
    logp.requires_grad_(True)
    mask = (t < torch.tensor(CANNED_LENGTHS, dtype=torch.float64).unsqueeze(1)).to(torch.float64)
    advantages = torch.tensor(CANNED_ADVANTAGES, dtype=torch.float64).unsqueeze(1).expand_as(mask).contiguous()
    sampler = canned_sampler(b, t, needs) if needs else None
    return PolicyBatch(logp=logp, old_logp=old, rollout_logp=rollout, advantages=advantages, mask=mask, sampler=sampler)


def canned_sampler(b: torch.Tensor, t: torch.Tensor, needs: tuple[str, ...]) -> SamplerDistribution:
    """The canned batch's sampler over a 6-entry vocabulary, for a loss that reads it: pi's log-probs
    (a leaf, requires grad) and mu's, their ratios up to e^1.5 either way (beyond Score Centering's TIS
    cap 2 and MIS band [0.5, 5]), and a near-deterministic mu where log pi / mu = 1.0 (entropy 0.02) and
    -0.17 (entropy 0.003): ESTR's mask fires on both, IPO's |pi - mu| <= 0.1 keeps the second."""
    v = torch.arange(_VOCAB, dtype=torch.float64)
    logits = torch.sin(0.9 * b[..., None] + 1.1 * t[..., None] + 1.7 * v)
    logq = (logits + 1.5 * torch.cos(1.3 * b[..., None] + 0.4 * t[..., None] + 2.9 * v)).log_softmax(-1)
    for (row, column), sharpness in {(0, 7): 8.0, (1, 0): 10.0}.items():
        logq[row, column] = torch.tensor([sharpness] + [0.0] * (_VOCAB - 1), dtype=torch.float64).log_softmax(-1)
    full = "sampler_logp" in needs
    return SamplerDistribution(logq=logq if full else None,
                               logp=logits.log_softmax(-1).requires_grad_(True) if full else None,
                               entropy=torch.special.entr(logq.exp()).sum(-1) if "sampler_entropy" in needs else None)


def _rounded(values: torch.Tensor) -> list[str]:
    """Each value to _DIGITS significant digits (text, so NaN and inf hash too)."""
    return [f"{value:.{_DIGITS - 1}e}" if math.isfinite(value) else repr(value)
            for value in values.detach().double().reshape(-1).tolist()]


def _digest(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def fingerprint(recipe: Recipe) -> dict[str, str]:
    """{"loss": the loss value, "gradient": hash of d loss / d logp, "metrics": hash of every
    metric, "digest": hash of the three}: the recipe run once on the canned batch (step seed 0)."""
    batch = canned_batch(loss_needs(recipe.loss))
    out = recipe.compute_loss(batch, step_seed=0)
    # the gradient reaches pi's log-probs over the vocabulary too where the loss reads them
    inputs = [batch.logp] + ([batch.sampler.logp] if batch.sampler is not None and batch.sampler.logp is not None else [])
    gradients = torch.autograd.grad(out.loss, inputs, allow_unused=True)
    # a loss that ignores an input (none should ignore logp): its gradient is zero
    rounded = [_rounded(torch.zeros_like(x) if g is None else g) for x, g in zip(inputs, gradients)]
    parts = {"loss": _rounded(out.loss)[0], "gradient": _digest(rounded[0] if len(rounded) == 1 else rounded),
             "metrics": _digest({name: _rounded(value) for name, value in out.metrics.items()})}
    return {**parts, "digest": _digest(parts)}
