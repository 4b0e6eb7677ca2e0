"""Prop. 4.1 of the SAT paper and the quantile's definition, as hypothesis properties.

Batches are random, with heavy-tailed d = log(pi / mu) (|d| up to 15), many exact ties, zeros,
padding and empty responses. "PPO" is the fixed-clip loss on the same ratio (against mu):
grpo / gspo with ratio_against="rollout".
"""
import bisect
import math
from fractions import Fraction

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stabilizers import PolicyBatch, SamplerDistribution, available, get, get_recipe, load_recipes
from stabilizers._surrogate import _radix_select, lower_quantile, sat_contraction, sat_gate, tail_gate

D_VALUES = st.one_of(
    st.floats(-0.05, 0.05),                                    # the LLM regime (mean |d| ~ 0.01)
    st.sampled_from([0.0, 0.01, -0.01, 0.02, 0.1, -0.1, 0.3]),  # ties
    st.floats(-15.0, 15.0),                                     # heavy tail
)
SMALL_D = st.one_of(st.floats(-0.15, 0.15), st.sampled_from([0.0, 0.01, -0.01, 0.05]))  # where SAT binds
ALPHAS = st.integers(1, 100).map(lambda i: i / 100)
EPS = st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5), (0.0, 0.0)])


@st.composite
def batches(draw, d_values=D_VALUES, dtype=None):
    b, length = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    n = b * length
    dtype = dtype or draw(st.sampled_from([torch.float32, torch.float64]))
    d = torch.tensor(draw(st.lists(d_values, min_size=n, max_size=n)), dtype=torch.float64).view(b, length)
    rollout = torch.tensor(draw(st.lists(st.floats(-8.0, 0.0), min_size=n, max_size=n)), dtype=torch.float64).view(b, length)
    adv = draw(st.lists(st.one_of(st.just(0.0), st.floats(-3.0, 3.0)), min_size=b, max_size=b))
    advantages = torch.tensor(adv, dtype=torch.float64)[:, None].expand(b, length)
    if draw(st.booleans()):  # token-level advantages too
        advantages = advantages + torch.tensor(draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n)),
                                               dtype=torch.float64).view(b, length)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=torch.float64).view(b, length)
    return make_batch(rollout + d, rollout, advantages, mask, dtype)


def make_batch(logp, rollout, advantages, mask, dtype):
    logp = logp.to(dtype).requires_grad_(True)
    return PolicyBatch(logp=logp, old_logp=(logp.detach() - 0.1), rollout_logp=rollout.to(dtype),
                       advantages=advantages.to(dtype).contiguous(), mask=mask.to(dtype))


def fresh(batch):
    """The same batch with a new leaf logp (for a second backward)."""
    logp = batch.logp.detach().clone().requires_grad_(True)
    return PolicyBatch(logp=logp, old_logp=batch.old_logp, rollout_logp=batch.rollout_logp,
                       advantages=batch.advantages, mask=batch.mask, sampler=batch.sampler)


def loss_and_grad(name, batch, **params):
    batch = fresh(batch)
    out = get(name)(batch, **params)
    out.loss.backward()
    return out, batch.logp.grad


def brute_quantile(values, alpha):
    """inf{x : (1/n) #{v <= x} >= alpha}, by trying every value (exact rational comparison)."""
    n, ordered = len(values), sorted(values)
    return min(x for x in values if Fraction(bisect.bisect_right(ordered, x), n) >= Fraction(repr(alpha)))


def sat_bounds(d, mask, q, eps_low, eps_high):
    """Per-token SAT interval [1 - eps_low c-, 1 + eps_high c+], c = 1 off the gate."""
    gate = tail_gate(d.abs(), mask.bool(), q)
    c_plus, c_minus = sat_contraction(d, q, gate)
    return gate, 1 - eps_low * c_minus, 1 + eps_high * c_plus


@given(st.lists(st.one_of(D_VALUES.map(abs), st.just(0.0)), min_size=1, max_size=60), ALPHAS)
def test_quantile_is_the_lower_inverse_cdf(values, alpha):
    q = lower_quantile(torch.tensor(values, dtype=torch.float64), alpha)
    assert q.item() == brute_quantile(values, alpha)


def kth_smallest(values, k, mask=None):
    """The k-th smallest (1-based) by the radix select that lower_quantile and sat_gate run on."""
    return _radix_select(values, lambda count: torch.as_tensor(k, device=values.device), mask)[0]


@given(st.integers(0, 2**31 - 1), st.integers(300, 3000), st.sampled_from([0.0, 0.3, 0.9]), st.data())
def test_kth_smallest_is_exact(seed, n, padding, data):
    """The radix select equals the sorted list's k-th value for every k (a Python int or
    a 0-d tensor), masked or not, with heavy tails and ties."""
    generator = torch.Generator().manual_seed(seed)
    # Cauchy(0, 0.01) by its inverse CDF, from the seeded generator (torch's Cauchy takes none)
    uniform = torch.rand(n, generator=generator, dtype=torch.float64)
    heavy = (0.01 * torch.tan(math.pi * (uniform - 0.5))).clamp(-15, 15)
    tied = torch.randint(0, 5, (n,), generator=generator).double() / 100
    values = torch.where(torch.rand(n, generator=generator) < 0.5, heavy.abs(), tied)
    active = torch.rand(n, generator=generator) >= padding
    for mask in (None, active):
        chosen = sorted(values.tolist() if mask is None else values[active].tolist())
        k = data.draw(st.integers(1, len(chosen)))
        assert kth_smallest(values, k, mask).item() == chosen[k - 1]
        assert kth_smallest(values.float(), torch.tensor(k), mask).item() == sorted(
            values.float().tolist() if mask is None else values.float()[active].tolist())[k - 1]


@given(st.integers(0, 2**31 - 1), st.integers(300, 3000), st.sampled_from([0.0, 0.3]), ALPHAS)
def test_sat_gate_finds_q_and_the_tail_in_one_pass(seed, n, padding, alpha):
    """sat_gate gives the brute-force q and exactly the mask {active, |d| > q}."""
    generator = torch.Generator().manual_seed(seed)
    tied = torch.randint(-3, 4, (1, n), generator=generator).double() / 100
    d = torch.where(torch.rand(1, n, generator=generator) < 0.5, tied, 0.05 * torch.randn(1, n, generator=generator) ** 3)
    batch = make_batch(d, torch.zeros_like(d), torch.ones_like(d), (torch.rand(1, n, generator=generator) >= padding),
                       torch.float64)
    magnitude = d.abs()
    q, gate = sat_gate(magnitude, batch, alpha, "microbatch")
    active = batch.mask.bool()
    assert q.item() == brute_quantile(magnitude[active].tolist(), alpha)
    assert torch.equal(gate, active & (magnitude > q) & (q > 0))


@given(st.sampled_from([torch.float64, torch.float32, torch.float16, torch.bfloat16]), st.integers(0, 2**31 - 1))
def test_kth_smallest_on_values_sharing_leading_bits(dtype, seed):
    """Radix select in every float width, on values that share their leading 16 bits (one
    histogram bin holds them all, so the later passes decide), with zeros and exact ties."""
    generator = torch.Generator().manual_seed(seed)
    values = (1 + torch.randint(0, 8, (200,), generator=generator).double() * torch.finfo(dtype).eps).to(dtype)
    values[:10] = 0
    chosen = sorted(values.tolist())
    for k in (1, 10, 11, 100, 200):
        assert kth_smallest(values, k).item() == chosen[k - 1]


@settings(max_examples=100)
@given(st.one_of(batches(), batches(d_values=SMALL_D)), ALPHAS, EPS)
def test_sat_interval_inside_ppo_interval(batch, alpha, eps):
    eps_low, eps_high = eps
    d = (batch.logp - batch.rollout_logp).detach()
    q = lower_quantile(d.abs(), alpha, batch.mask)
    active = batch.mask.bool()
    assert q.item() == (brute_quantile(d.abs()[active].tolist(), alpha) if active.any() else 0.0)
    gate, low, high = sat_bounds(d, batch.mask, q, eps_low, eps_high)
    one = torch.ones((), dtype=d.dtype)
    assert torch.all(low >= 1 - torch.as_tensor(eps_low, dtype=d.dtype)) and torch.all(low <= one)
    assert torch.all(high <= 1 + torch.as_tensor(eps_high, dtype=d.dtype)) and torch.all(high >= one)
    # the gate is exactly {active, q > 0, |d| > q}; on it only the side d points to shrinks, by psi < 1/2
    assert torch.equal(gate, active & (q > 0) & (d.abs() > q))
    c_plus, c_minus = sat_contraction(d, q, gate)
    dg = d[gate]
    psi = 1 / (1 + (dg.abs() / q) ** 2)
    assert torch.equal(torch.where(dg > 0, c_plus[gate], c_minus[gate]), psi) and torch.all(psi < 0.5)
    assert torch.all(torch.where(dg > 0, c_minus[gate], c_plus[gate]) == 1)
    assert torch.all(c_plus[~gate] == 1) and torch.all(c_minus[~gate] == 1)


@settings(max_examples=100)
@given(st.one_of(batches(), batches(d_values=SMALL_D)), ALPHAS, EPS, st.sampled_from(["token_mean", "sample_mean"]))
def test_sat_objective_and_gradient_against_ppo(batch, alpha, eps, aggregation):
    eps_low, eps_high = eps
    params = dict(eps_low=eps_low, eps_high=eps_high, aggregation=aggregation)
    sat, sat_grad = loss_and_grad("sat_grpo", batch, alpha=alpha, **params)
    ppo, ppo_grad = loss_and_grad("grpo", batch, ratio_against="rollout", **params)
    # S_SAT <= S_PPO on every token, so the (negated, same-order) mean satisfies loss_SAT >= loss_PPO
    assert sat.loss.item() >= ppo.loss.item()

    d = (batch.logp - batch.rollout_logp).detach()
    r, adv, dtype = d.exp(), batch.advantages, d.dtype
    q = sat.metrics["sat/q"]
    _, low, high = sat_bounds(d, batch.mask, q, eps_low, eps_high)
    lo_ppo, hi_ppo = 1 - torch.as_tensor(eps_low, dtype=dtype), 1 + torch.as_tensor(eps_high, dtype=dtype)
    s_sat = torch.minimum(r * adv, r.clamp(low, high) * adv)
    s_ppo = torch.minimum(r * adv, r.clamp(lo_ppo, hi_ppo) * adv)
    assert torch.all(s_sat <= s_ppo)
    # the public loss is the mean of this pointwise S_SAT (an independent re-derivation of Eq. 19-20)
    active = batch.mask.bool()
    s = torch.where(active, s_sat, 0.0)
    if aggregation == "token_mean":
        expected = -s.sum() / active.sum().clamp(min=1)
    else:
        lengths = active.sum(-1)
        expected = -(s.sum(-1) / lengths.clamp(min=1)).sum() / (lengths > 0).sum().clamp(min=1)
    torch.testing.assert_close(sat.loss.detach(), expected.to(dtype))

    check_gradients_differ_only_where_newly_clipped(batch, sat_grad, ppo_grad, low, high, lo_ppo, hi_ppo)


def check_gradients_differ_only_where_newly_clipped(batch, sat_grad, ppo_grad, low, high, lo_ppo, hi_ppo):
    """Gradients equal PPO's except on tokens newly clipped on the outward side (A (r - 1) > 0)
    whose ratio lies between the SAT and the PPO bound; there SAT's gradient is 0. Returns how many differ."""
    r = (batch.logp - batch.rollout_logp).detach().exp()
    differ = sat_grad != ppo_grad
    outward = batch.advantages * (r - 1) > 0
    between = torch.where(r > 1, (r >= high) & (r <= hi_ppo), (r <= low) & (r >= lo_ppo))
    assert torch.all(outward[differ] & between[differ])
    assert torch.all(sat_grad[differ] == 0)
    return int(differ.sum())


def test_gradients_on_an_llm_like_batch():
    """The same property on 4000 tokens with mean |d| ~ 0.01 and a heavy tail, where it is not vacuous."""
    generator = torch.Generator().manual_seed(7)
    rollout = -4 * torch.rand(8, 500, generator=generator, dtype=torch.float64)
    d = 0.02 * torch.randn(8, 500, generator=generator, dtype=torch.float64) ** 3
    advantages = torch.randn(8, 1, generator=generator, dtype=torch.float64).expand(8, 500)
    mask = (torch.rand(8, 500, generator=generator) > 0.2).double()
    batch = make_batch(rollout + d, rollout, advantages, mask, torch.float64)
    sat, sat_grad = loss_and_grad("sat_grpo", batch)
    _, ppo_grad = loss_and_grad("grpo", batch, ratio_against="rollout")
    d = (batch.logp - batch.rollout_logp).detach()
    _, low, high = sat_bounds(d, batch.mask, sat.metrics["sat/q"], 0.2, 0.2)
    lo_ppo, hi_ppo = torch.tensor(0.8, dtype=torch.float64), torch.tensor(1.2, dtype=torch.float64)
    assert check_gradients_differ_only_where_newly_clipped(batch, sat_grad, ppo_grad, low, high, lo_ppo, hi_ppo) > 10


@given(batches(), ALPHAS, st.sampled_from(["token_mean", "sample_mean"]))
def test_disabled_sat_is_the_fixed_clip_bit_for_bit(batch, alpha, aggregation):
    for sat_name, fixed_name in (("sat_grpo", "grpo"), ("sat_gspo", "gspo")):
        fixed, fixed_grad = loss_and_grad(fixed_name, batch, ratio_against="rollout", aggregation=aggregation)
        off, off_grad = loss_and_grad(sat_name, batch, alpha=alpha, enabled=False, aggregation=aggregation)
        assert torch.equal(off.loss, fixed.loss) and torch.equal(off_grad, fixed_grad)
    # sat_fixed with threshold 0 is the fixed clip too
    zero, zero_grad = loss_and_grad("sat_fixed", batch, threshold=0.0, aggregation=aggregation)
    fixed, fixed_grad = loss_and_grad("grpo", batch, ratio_against="rollout", aggregation=aggregation)
    assert torch.equal(zero.loss, fixed.loss) and torch.equal(zero_grad, fixed_grad)


@given(batches(d_values=st.one_of(st.just(0.0), st.just(0.0), st.floats(-1, 1))),
       st.sampled_from([0.5, 0.9, 0.95]), st.sampled_from(["token_mean", "sample_mean"]))
def test_q_zero_is_the_fixed_clip_bit_for_bit(batch, alpha, aggregation):
    """When at least alpha of the active |d| are 0, q = 0 and nothing is gated."""
    for sat_name, fixed_name in (("sat_grpo", "grpo"), ("sat_gspo", "gspo"), ("sat_random", "grpo")):
        out, grad = loss_and_grad(sat_name, batch, alpha=alpha, aggregation=aggregation)
        prefix = "sat_random" if sat_name == "sat_random" else "sat"
        if out.metrics[f"{prefix}/q"].item() != 0.0:
            continue
        fixed, fixed_grad = loss_and_grad(fixed_name, batch, ratio_against="rollout", aggregation=aggregation)
        assert out.metrics[f"{prefix}/gate_rate"].item() == 0.0
        assert torch.equal(out.loss, fixed.loss) and torch.equal(grad, fixed_grad)


def test_q_zero_case_is_reached():
    """The property above is not vacuous: a batch with 90% of |d| = 0 has q = 0 and equals GRPO."""
    logp = torch.tensor([[-1.0] * 9 + [-0.5]])
    batch = make_batch(logp, torch.full_like(logp, -1.0), torch.ones_like(logp), torch.ones_like(logp), torch.float32)
    out, grad = loss_and_grad("sat_grpo", batch)
    fixed, fixed_grad = loss_and_grad("grpo", batch, ratio_against="rollout")
    assert out.metrics["sat/q"].item() == 0.0
    assert torch.equal(out.loss, fixed.loss) and torch.equal(grad, fixed_grad)


@given(batches(), st.sampled_from(["token_mean", "sample_mean"]))
def test_no_active_token_gives_zero_loss_and_zero_gradient(batch, aggregation):
    uniform = torch.full((*batch.logp.shape, 4), -math.log(4), dtype=batch.logp.dtype)  # for Score Centering, ESTR
    empty = PolicyBatch(logp=batch.logp, old_logp=batch.old_logp, rollout_logp=batch.rollout_logp,
                        advantages=batch.advantages, mask=torch.zeros_like(batch.mask),
                        sampler=SamplerDistribution(logq=uniform, logp=uniform, entropy=uniform.sum(-1) * -0.25))
    for name in available():
        out, grad = loss_and_grad(name, empty, aggregation=aggregation)
        assert out.loss.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad)), name
        assert all(torch.isfinite(v).all() for v in out.metrics.values()), name
    for recipe in load_recipes().values():
        b = fresh(empty)
        out = recipe.compute_loss(b, step_seed=1)
        out.loss.backward()
        assert out.loss.item() == 0.0 and not b.logp.grad.any(), recipe.name


@given(batches(dtype=torch.float64))
def test_tis_recipe_is_the_weighted_loss(batch):
    """TIS composes with any loss: grpo_tis equals grpo on the same batch with min(old/mu, 2) weights."""
    b = fresh(batch)
    weight = (b.old_logp - b.rollout_logp).exp().clamp(max=2.0)
    expected = get("grpo")(b.with_token_weight(weight)).loss
    assert torch.equal(get_recipe("grpo_tis").compute_loss(b).loss, expected)
    assert math.isfinite(expected.item())


@settings(max_examples=60, deadline=None)
@given(log_r=st.lists(st.one_of(D_VALUES, st.sampled_from([math.log(0.8), math.log(1.2), 100.0, -100.0])),
                      min_size=1, max_size=24),
       advantage=st.sampled_from([-1.5, 0.0, 0.7]), per_token_bounds=st.booleans(), eps=EPS)
def test_clipped_objective_is_min_and_clamp_with_their_gradient(log_r, advantage, per_token_bounds, eps):
    """clipped_objective (its derivative written out, its indicator computed in floats) equals
    torch.minimum(r A, clamp(r, low, high) A) under autograd, value and gradient bit for bit,
    at exact bound ties, exp overflow (r = inf) and zero advantages."""
    from stabilizers._surrogate import clip_bounds, clipped_objective

    def objective_and_grad(fn):
        x = torch.tensor(log_r, dtype=torch.float32, requires_grad=True)
        low, high = clip_bounds(*eps, x)
        if per_token_bounds:  # SAT's shape: a bound per token
            low, high = low.expand(x.shape).clone(), high.expand(x.shape).clone()
        values = fn(torch.exp(x), torch.full(x.shape, advantage), low, high)
        values.sum().backward()
        return values.detach(), x.grad

    def by_definition(ratio, advantages, low, high):
        return torch.minimum(ratio * advantages, torch.clamp(ratio, low, high) * advantages)

    (ours, our_grad), (reference, reference_grad) = objective_and_grad(clipped_objective), objective_and_grad(by_definition)
    assert torch.equal(ours.isnan(), reference.isnan()) and torch.equal(ours.nan_to_num(), reference.nan_to_num())
    assert torch.equal(our_grad.isnan(), reference_grad.isnan())
    assert torch.equal(our_grad.nan_to_num(), reference_grad.nan_to_num())
