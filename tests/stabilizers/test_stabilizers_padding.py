"""Finite on any padding (issue 62): every registered loss, and every recipe with its switches (TIS,
rollout correction, the veto), gives a finite loss and gradient when the masked positions of the recorded
data hold -inf, +inf or NaN: log mu, the trainer's recompute, the advantages, a token weight, the sampler's
log-probs and entropy; a response with no active token included. The values at active positions are the
fingerprint's canned batch, so the loss must also equal the one on that batch with finite padding. The
trainer's own log-probs (the tensors with gradient) are finite at padding, as a forward pass computes them."""
import dataclasses
import math

import pytest
import torch

from stabilizers import SamplerDistribution, available, get, load_recipes, loss_needs, validate_batch
from stabilizers._fingerprint import canned_batch

NEEDS = ("sampler_logp", "sampler_entropy")


def leaves(batch):
    """The batch's tensors as fresh leaves (logp and the sampler's logp require grad)."""
    sampler = batch.sampler
    return dataclasses.replace(
        batch, logp=batch.logp.detach().clone().requires_grad_(True),
        sampler=SamplerDistribution(logq=sampler.logq.clone(), logp=sampler.logp.detach().clone().requires_grad_(True),
                                    entropy=sampler.entropy.clone()))


def padded(batch, fill):
    """``batch`` with ``fill`` in every masked position of every recorded tensor (the sampler's too), and its
    last response (one token long on the canned batch) masked out entirely."""
    mask = batch.mask.clone()
    mask[-1] = 0
    pad = ~mask.bool()

    def fill_in(x):
        x = x.detach().clone()
        x[pad] = fill
        return x

    sampler = batch.sampler
    return dataclasses.replace(
        batch, logp=batch.logp.detach().clone().requires_grad_(True), old_logp=fill_in(batch.old_logp),
        rollout_logp=fill_in(batch.rollout_logp), advantages=fill_in(batch.advantages), mask=mask,
        token_weight=fill_in(torch.ones_like(batch.logp)),
        sampler=SamplerDistribution(logq=fill_in(sampler.logq), logp=sampler.logp.detach().clone().requires_grad_(True),
                                    entropy=fill_in(sampler.entropy)))


def loss_and_gradients(compute, batch):
    out = compute(batch)
    inputs = [batch.logp] + ([batch.sampler.logp] if batch.sampler is not None else [])
    grads = torch.autograd.grad(out.loss, inputs, allow_unused=True)
    return out, [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


def clean(batch):
    """The same batch with its padding finite (the last response masked too)."""
    mask = batch.mask.clone()
    mask[-1] = 0
    return dataclasses.replace(leaves(batch), mask=mask, token_weight=torch.ones_like(batch.logp))


@pytest.mark.parametrize("fill", [-math.inf, math.nan, math.inf], ids=["-inf", "nan", "inf"])
@pytest.mark.parametrize("name", available())
def test_every_loss_is_finite_on_non_finite_padding(name, fill):
    base = canned_batch(NEEDS)
    batch = padded(base, fill)
    validate_batch(batch)  # non-finite padding is accepted: it is replaced before any loss reads it
    out, grads = loss_and_gradients(get(name), batch)
    assert torch.isfinite(out.loss), f"{name}: loss {out.loss.item()} with {fill} padding"
    for g in grads:
        assert torch.isfinite(g).all(), f"{name}: non-finite gradient with {fill} padding"
        assert (g[~batch.mask.bool()] == 0).all(), f"{name}: a gradient reaches the padding"
    for metric, value in out.metrics.items():
        assert torch.isfinite(value).all(), f"{name}: metric {metric} is {value} with {fill} padding"
    reference, _ = loss_and_gradients(get(name), clean(base))
    torch.testing.assert_close(out.loss, reference.loss, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", sorted(load_recipes()))
def test_every_recipe_is_finite_on_nan_padding(name):
    """The recipe switches (TIS, the rollout correction's sequence ratios, the veto) run before the loss."""
    recipe = load_recipes()[name]
    batch = padded(canned_batch(NEEDS), math.nan)
    if not loss_needs(recipe.loss):
        batch = dataclasses.replace(batch, sampler=None)
    out, grads = loss_and_gradients(lambda b: recipe.compute_loss(b, step_seed=0), batch)
    assert torch.isfinite(out.loss) and all(torch.isfinite(g).all() for g in grads), name
