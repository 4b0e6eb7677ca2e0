"""The field as of autumn 2026 (issue 50): IPO, Score Centering (exact and top-k, weights none / TIS /
MIS), ESTR and TOPR against values worked by hand or in plain numpy (float64), and the contract's
sampler field: a loss that reads it registers what it needs, and an engine that cannot give it is
refused by the config check, naming the recipe, the loss and the engine. Formulas: each module's
docstring and docs/stabilizers.md."""
import math
import re

import numpy as np
import pytest
import torch
import yaml

from grid.config import ConfigError, validate
from grid.expand import resolve_run_config
from harness.run_config import RunConfig
from stabilizers import PolicyBatch, SamplerDistribution, get, load_recipes, loss_needs, register, validate_batch
from stabilizers._fingerprint import canned_batch
from tests.support.paths import ROOT

F64 = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=F64)


def batch_of(logp, rollout, advantages, mask=None, *, sampler=None):
    logp = t(logp).requires_grad_(True)
    return PolicyBatch(logp=logp, old_logp=logp.detach(), rollout_logp=t(rollout), advantages=t(advantages),
                       mask=torch.ones_like(logp) if mask is None else t(mask), sampler=sampler)


def grad(out, tensor):
    (g,) = torch.autograd.grad(out.loss, tensor, retain_graph=True)
    return g


# ---------------------------------------------------------------- IPO
def test_ipo_by_hand():
    """Row 0 (A = 2): p = 0.5 vs q = 0.45 kept (r = 10/9), 0.3 vs 0.5 masked (|0.2| > 0.1);
    row 1 (A = -1): 0.6 vs 0.4 masked whatever the sign, 0.2 vs 0.25 kept (r = 0.8).
    loss = -(2 * 10/9 - 0.8) / 4; d loss / d logp = -A r / 4 on the kept tokens (d r = r d logp)."""
    batch = batch_of([[math.log(0.5), math.log(0.3)], [math.log(0.6), math.log(0.2)]],
                     [[math.log(0.45), math.log(0.5)], [math.log(0.4), math.log(0.25)]], [[2.0, 2.0], [-1.0, -1.0]])
    out = get("ipo")(batch, eps=0.1)
    torch.testing.assert_close(out.loss, t(-(2 * 10 / 9 - 0.8) / 4))
    torch.testing.assert_close(grad(out, batch.logp), t([[-2 * 10 / 9 / 4, 0.0], [0.0, 0.8 / 4]]))
    assert out.metrics["ipo/masked_frac"].item() == 0.5
    # the cap bounds the value and the gradient weight alike: min(10/9, 1.05) = 1.05 on the first token
    capped = get("ipo")(batch, eps=0.1, max_importance_ratio=1.05)
    torch.testing.assert_close(capped.loss, t(-(2 * 1.05 - 0.8) / 4))
    torch.testing.assert_close(grad(capped, batch.logp), t([[-2 * 1.05 / 4, 0.0], [0.0, 0.8 / 4]]))
    assert capped.metrics["ipo/capped_frac"].item() == 0.25
    # today's default eps 0.3 keeps all four (the largest |p - q| is 0.2)
    assert get("ipo")(batch).metrics["ipo/masked_frac"].item() == 0.0


def test_ipo_caps_the_gradient_as_prime_rl_does():
    """Three kept tokens, A = 1, cap 1e4 (issue 62): r = 5e4, e^21 and 1.11 (q = 1e-7, 1e-12, 0.5; every
    |p - q| <= 0.06). prime-rl's gradient weight is min(r, cap): d loss / d logp = -(1e4, 1e4, 1.11) / 3 =
    -3333.33, -3333.33, -0.37. The value-only cap read before gave -16666.67, 0.0 (its e^20 clamp) and -0.37."""
    q = t([[1e-7, 1e-12, 0.5]])
    batch = batch_of((q * t([[5e4, math.exp(21), 1.11]])).log().tolist(), q.log().tolist(), [[1.0, 1.0, 1.0]])
    out = get("ipo")(batch)
    torch.testing.assert_close(grad(out, batch.logp), t([[-3333.33, -3333.33, -0.37]]), rtol=0, atol=0.005)
    torch.testing.assert_close(out.loss, t(-(2e4 + 1.11) / 3))
    assert out.metrics["ipo/capped_frac"].item() == 2 / 3
    # the cap is live: at cap 1e5 the first token's weight is its r, 5e4
    assert grad(get("ipo")(batch, max_importance_ratio=1e5), batch.logp)[0, 0].item() == pytest.approx(-5e4 / 3)


def test_ipo_pr3418_adds_the_squared_log_ratio_on_every_token():
    """kl_coef (log r)^2 counts on masked tokens too (prime-rl's ipo_loss_fn: loss_mask * log_ratio**2)."""
    batch = batch_of([[math.log(0.5), math.log(0.3)]], [[math.log(0.45), math.log(0.5)]], [[1.0, 1.0]])
    with_kl, without = get("ipo")(batch, eps=0.1, kl_coef=1e-3), get("ipo")(batch, eps=0.1)
    log_r = [math.log(0.5 / 0.45), math.log(0.3 / 0.5)]
    torch.testing.assert_close(with_kl.loss - without.loss, t(1e-3 * (log_r[0] ** 2 + log_r[1] ** 2) / 2))
    torch.testing.assert_close(grad(with_kl, batch.logp) - grad(without, batch.logp), t([[1e-3 * x for x in log_r]]))


# ---------------------------------------------------------------- TOPR
def test_topr_by_hand():
    """Log-ratios log pi/mu: row 0 (A = 1) 0.5, 0.3: weight 1; row 1 (A = -2) 0.2, -0.5: the sequence
    ratio e^-0.3 < 1; row 2 (A = -1) 0.4 and a padded token: e^0.4 tapered to 1.
    loss = -sum_t w A log pi / 5 active tokens; its gradient -w A / 5."""
    rollout = [[-1.0, -1.2], [-0.9, -0.7], [-1.5, -2.0]]
    log_r = [[0.5, 0.3], [0.2, -0.5], [0.4, 3.0]]  # the padded token's 3.0 must not count
    logp = (np.array(rollout) + np.array(log_r)).tolist()
    batch = batch_of(logp, rollout, [[1.0, 1.0], [-2.0, -2.0], [-1.0, -1.0]], [[1, 1], [1, 1], [1, 0]])
    out = get("topr")(batch)
    w = [1.0, math.exp(-0.3), 1.0]
    adv = [1.0, -2.0, -1.0]
    active = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    expected = -sum(w[i] * adv[i] * logp[i][j] for i, j in active) / 5
    torch.testing.assert_close(out.loss, t(expected))
    torch.testing.assert_close(grad(out, batch.logp), t([[-1 / 5, -1 / 5], [2 * w[1] / 5] * 2, [1 / 5, 0.0]]))
    torch.testing.assert_close(out.metrics["topr/negative_weight_mean"], t((2 * w[1] + 1) / 3))


# ---------------------------------------------------------------- ESTR
def entropy_batch(delta, entropy, advantages):
    rollout = [[-1.0] * len(delta[0])] * len(delta)
    logp = (np.array(rollout) + np.array(delta)).tolist()
    return batch_of(logp, rollout, advantages, sampler=SamplerDistribution(entropy=t(entropy)))


def test_estr_by_hand():
    """delta^2 / (H + 0.01) <= tau = 1: (0.3, H 0.04) -> 1.8 masked; (0.3, H 1.0) -> 0.089 kept, r = e^0.3
    > 1.2 with A = 1: the clip's 1.2, no gradient; (-0.05, H 0) -> 0.25 kept, r = e^-0.05 with A = -1:
    -r; (0.1, H 0.5) -> 0.0196 kept, A = -1: -e^0.1. Masked tokens stay in the denominator (4)."""
    batch = entropy_batch([[0.3, 0.3], [-0.05, 0.1]], [[0.04, 1.0], [0.0, 0.5]], [[1.0, 1.0], [-1.0, -1.0]])
    out = get("estr")(batch)
    torch.testing.assert_close(out.loss, t(-(1.2 - math.exp(-0.05) - math.exp(0.1)) / 4))
    torch.testing.assert_close(grad(out, batch.logp), t([[0.0, 0.0], [math.exp(-0.05) / 4, math.exp(0.1) / 4]]))
    assert out.metrics["estr/masked_frac"].item() == 0.25
    # tau 0.2 masks the zero-entropy token's |delta| 0.05 (0.25) and keeps the high-entropy one's 0.3 (0.089)
    assert get("estr")(batch, tau=0.2).metrics["estr/masked_frac"].item() == 0.5


def test_estr_with_an_infinite_tau_is_grpo_against_mu_bit_for_bit():
    batch = canned_batch(("sampler_entropy",))
    estr, grpo = get("estr")(batch, tau=math.inf), get("grpo")(batch, ratio_against="rollout")
    assert torch.equal(estr.loss, grpo.loss)
    assert torch.equal(grad(estr, batch.logp), grad(grpo, batch.logp))


# ---------------------------------------------------------------- Score Centering
# one response of two tokens over a 3-entry vocabulary; q the sampler, p the current policy
Q = np.array([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]])
P = np.array([[[0.15, 0.7, 0.15], [0.5, 0.3, 0.2]]])
SAMPLED = [1, 2]  # p/q at them: 7/3 and 2
A = -0.5


def centering_batch(q=Q, p=P, sampled=SAMPLED, advantage=A):
    logp_all = torch.tensor(np.log(p), dtype=F64).requires_grad_(True)
    rows = range(q.shape[1])
    batch = batch_of([[math.log(p[0, i, sampled[i]]) for i in rows]], [[math.log(q[0, i, sampled[i]]) for i in rows]],
                     [[advantage] * q.shape[1]],
                     sampler=SamplerDistribution(logq=torch.tensor(np.log(q), dtype=F64), logp=logp_all))
    return batch, logp_all


def numpy_centering(f, q=Q, p=P, sampled=SAMPLED, advantage=A):
    """(loss, d loss / d log p(y_t), d loss / d log p_v) of the exact form, by its formula."""
    r = p / q
    cw = q * f(r)
    w = np.array([f(r[0, i, y]) for i, y in enumerate(sampled)])
    score = w * np.log([p[0, i, y] for i, y in enumerate(sampled)]) - (cw * np.log(p)).sum(-1)[0]
    n = len(sampled)
    return -advantage * score.sum() / n, -advantage * w / n, advantage * cw / n


WEIGHTS = {"none": lambda r: np.ones_like(r), "tis": lambda r: np.minimum(r, 2.0),
           "mis": lambda r: r * ((r >= 0.5) & (r <= 5.0))}


@pytest.mark.parametrize("weight", sorted(WEIGHTS))
def test_score_centering_exact_form_by_its_formula(weight):
    """TIS caps 7/3 at 2 (the sampled token and the centering mass alike); MIS drops 0.15/0.5 = 0.3 from
    the centering mass; none centres on q itself."""
    batch, logp_all = centering_batch()
    out = get("score_centering")(batch, weight=weight)
    loss, d_token, d_vocab = numpy_centering(WEIGHTS[weight])
    torch.testing.assert_close(out.loss, t(loss))
    torch.testing.assert_close(grad(out, batch.logp), torch.tensor(d_token[None], dtype=F64))
    torch.testing.assert_close(grad(out, logp_all), torch.tensor(d_vocab, dtype=F64))


def test_score_centering_top_k_form_by_hand():
    """k = 1 on the first token: the head is q's largest entry (0), the tail {1, 2} has q mass 0.5 and p
    mass 0.85, rho = 0.5 / 0.85; its mass is alpha p with alpha = rho (none), min(1, 2 rho) = 1 (TIS),
    1[0.5 <= 1/rho = 1.7 <= 5] = 1 (MIS). The second token's head is entry 0 too: tail q 0.4, p 0.5."""
    rho = np.array([0.5 / 0.85, 0.4 / 0.5])
    for weight, alpha in (("none", rho), ("tis", np.minimum(1, 2 * rho)), ("mis", np.ones(2))):
        f = WEIGHTS[weight]
        mass = P[0] * alpha[:, None]
        mass[:, 0] = Q[0, :, 0] * f(P[0, :, 0] / Q[0, :, 0])
        batch, logp_all = centering_batch()
        out = get("score_centering")(batch, weight=weight, top_k=1)
        torch.testing.assert_close(grad(out, logp_all), torch.tensor(A * mass[None] / 2, dtype=F64))
        w = np.array([f(7 / 3), f(2.0)])
        score = w * np.log([0.7, 0.2]) - (mass * np.log(P[0])).sum(-1)
        torch.testing.assert_close(out.loss, t(-A * score.sum() / 2))


def test_score_centering_top_k_floors_the_tail_mass_of_p():
    """rho = Q_tail / max(P_tail, 1e-6), as the authors' code, prime-rl and the paper's appendix A.3 have
    it (issue 62). Head {0, 1} (k = 2); the tail {2} holds q 0.2 and p 1e-8: rho = 0.2 / 1e-6 = 2e5, the
    tail's mass alpha p = 2e5 * 1e-8 = 2e-3 (0.2 without the floor, q's own tail mass)."""
    q, p = np.array([[[0.5, 0.3, 0.2]]]), np.array([[[0.6, 0.4 - 1e-8, 1e-8]]])
    batch, logp_all = centering_batch(q, p, [0], 1.0)
    out = get("score_centering")(batch, top_k=2)
    torch.testing.assert_close(grad(out, logp_all), t([[[0.5, 0.3, 2e-3]]]), rtol=1e-9, atol=0)
    # above the floor the tail's mass is q's own, 0.2: the exact form's
    p = np.array([[[0.6, 0.2, 0.2]]])
    batch, logp_all = centering_batch(q, p, [0], 1.0)
    torch.testing.assert_close(grad(get("score_centering")(batch, top_k=2), logp_all), t([[[0.5, 0.3, 0.2]]]))


def random_centering_batch(vocab, seed=0):
    g = np.random.default_rng(seed)
    logits = g.normal(size=(3, 5, vocab))
    q = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    p_logits = logits + 0.8 * g.normal(size=logits.shape)
    p = np.exp(p_logits) / np.exp(p_logits).sum(-1, keepdims=True)
    sampled = g.integers(0, vocab, size=(3, 5))
    logp_all = torch.tensor(np.log(p), dtype=F64).requires_grad_(True)
    token = torch.tensor(sampled)[..., None]
    batch = PolicyBatch(logp=logp_all.gather(-1, token)[..., 0], old_logp=torch.zeros(3, 5, dtype=F64),
                        rollout_logp=torch.tensor(np.log(q), dtype=F64).gather(-1, token)[..., 0],
                        advantages=torch.tensor(g.normal(size=(3, 1))).expand(3, 5).contiguous(),
                        mask=torch.ones(3, 5, dtype=F64),
                        sampler=SamplerDistribution(logq=torch.tensor(np.log(q), dtype=F64), logp=logp_all))
    return batch, logp_all


@pytest.mark.parametrize("weight", sorted(WEIGHTS))
def test_the_top_k_form_reaches_the_exact_form_as_k_reaches_the_vocabulary(weight):
    """Its error shrinks with the tail; with one entry in the tail the model q_tail = rho p_tail is exact
    (rho = q_v / p_v), so k = V - 1 equals the exact form to rounding, and k = V is the exact form bit
    for bit."""
    vocab = 8
    batch, logp_all = random_centering_batch(vocab)
    centering = get("score_centering")
    exact = centering(batch, weight=weight)
    exact_grad = grad(exact, logp_all)
    errors = []
    for k in range(1, vocab + 1):
        out = centering(batch, weight=weight, top_k=k)
        errors.append((out.loss - exact.loss).abs().item() + (grad(out, logp_all) - exact_grad).abs().max().item())
    assert errors[-2] < 1e-12 and errors[-1] == 0.0
    assert errors[0] > 1e-3  # a one-entry head is an approximation
    assert torch.equal(centering(batch, weight=weight, top_k=vocab + 5).loss, exact.loss)


def test_score_centering_without_a_sampler_names_what_it_needs():
    batch = batch_of([[-1.0]], [[-1.0]], [[1.0]])
    with pytest.raises(ValueError, match=r"'score_centering' needs PolicyBatch.sampler.logq"):
        get("score_centering")(batch)
    with pytest.raises(ValueError, match=r"'estr' needs PolicyBatch.sampler.entropy"):
        get("estr")(batch)
    with pytest.raises(ValueError, match="top_k = -1"):
        get("score_centering")(centering_batch()[0], top_k=-1)


# ---------------------------------------------------------------- the contract
def test_needs_are_read_from_the_source_and_checked_at_registration():
    assert loss_needs("score_centering") == ("sampler_logp",)
    assert loss_needs("estr") == ("sampler_entropy",)
    assert loss_needs("grpo") == () and loss_needs("topr") == ()
    with pytest.raises(ValueError, match="needs \\['sampler_topk'\\]"):
        register("wants_topk", needs=("sampler_topk",))


def test_a_sampler_of_the_wrong_shape_is_named():
    batch, _ = centering_batch()
    validate_batch(batch)
    bad = PolicyBatch(logp=batch.logp, old_logp=batch.old_logp, rollout_logp=batch.rollout_logp,
                      advantages=batch.advantages, mask=batch.mask,
                      sampler=SamplerDistribution(logq=batch.sampler.logq[:, :1], logp=batch.sampler.logp))
    with pytest.raises(ValueError, match=r"PolicyBatch.sampler.logq has shape \(1, 1, 3\)"):
        validate_batch(bad)


def test_a_recipe_that_needs_the_sampler_is_refused_by_an_engine_that_cannot_give_it():
    """At the config check, before any job: slime's pin carries only the sampled token's log-prob."""
    grid = yaml.safe_load(open("tests/support/interval_grid.yaml"))
    table1 = yaml.safe_load(open("workflow/presets/table1.yaml"))
    on_slime = {**grid, "engine": "slime", "engine_params": table1["engine_params"], "eval": table1["eval"],
                "recipes": ["grpo", "score_centering_tis", "estr", "topr", "ipo"], "baseline": "grpo"}
    with pytest.raises(ConfigError) as info:
        validate(on_slime)
    message = str(info.value)
    assert "config key 'recipes[1]': recipe 'score_centering_tis' (loss 'score_centering') needs sampler_logp" in message
    assert "config key 'recipes[2]': recipe 'estr' (loss 'estr') needs sampler_entropy" in message
    assert "engine 'slime' cannot supply (the pinned slime records only the sampled token's log-prob" in message
    assert "recipes[3]" not in message and "recipes[4]" not in message  # topr and ipo read mu(y_t) only
    validate({**on_slime, "recipes": ["grpo", "topr", "ipo"]})
    validate({**grid, "recipes": ["grpo", "score_centering_tis", "estr"], "baseline": "grpo"})  # tiny supplies both
    # and a run config that reached a job anyway (written by hand, or before this check) is refused there too
    run_grid = {"grid": "g", "engine": "slime", "lag_mode": "interval", "steps": 2, "eval_every": 1, "recipes": ["estr"],
                "lags": [1], "seeds": [0], "engine_params": table1["engine_params"]}
    with pytest.raises(ValueError, match="recipe 'estr' \\(loss 'estr'\\) needs sampler_entropy.*engine 'slime'"):
        RunConfig.check(resolve_run_config(run_grid, "estr", 1, 0))


def test_every_new_recipe_is_registered_with_its_loss():
    recipes = load_recipes()
    assert {name: recipes[name].loss for name in ("ipo", "score_centering", "score_centering_tis", "score_centering_mis",
                                                  "score_centering_top4", "estr", "topr")} == {
        "ipo": "ipo", "score_centering": "score_centering", "score_centering_tis": "score_centering",
        "score_centering_mis": "score_centering", "score_centering_top4": "score_centering", "estr": "estr",
        "topr": "topr"}


def test_every_recipe_is_on_the_policy_triangle_map():
    """docs/stabilizers.md's map names each recipe of recipes.yaml in its first column, once."""
    text = (ROOT / "docs" / "stabilizers.md").read_text()
    section = text.split("## The Policy Triangle map")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    named = [name for cell in rows for name in re.findall(r"`([a-z0-9_]+)`", cell)]
    assert sorted(named) == sorted(load_recipes())
