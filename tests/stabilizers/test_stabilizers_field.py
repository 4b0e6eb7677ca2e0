"""The field beyond SAT (M2PO, IcePop, decoupled PPO, CISPO, sequence TIS / masked IS) and the
off-policy diagnostics: values worked out by hand (float64), the disabled cases against their base
loss bit for bit, detached masks and weights, and the empty batch. Formulas: each module's docstring
and docs/stabilizers.md."""
import math

import pytest
import torch

from stabilizers import PolicyBatch, Recipe, ess_lr_scale, get, get_recipe, load_recipes, offpolicy_diagnostics
from stabilizers.m2po import greedy_m2_mask

F64 = torch.float64
NEW_LOSSES = ("m2po", "icepop", "decoupled_ppo", "cispo")
NEW_RECIPES = ("m2po", "icepop", "decoupled_ppo", "cispo", "cispo_old", "grpo_seq_tis", "grpo_seq_mis")
# issue 62, not in field.yaml: the two checks that take any recipe (the filtered recipe drops every response of
# random_batch, whose ratios are far from 1; its filter is worked by hand below)
SINCE_AUTUMN = ("flash_reinforce_unfiltered",)
e = math.exp


def t(rows):
    return torch.tensor(rows, dtype=F64)


def make(r, rho, advantages, mask, *, rollout=-1.0):
    """log mu = rollout, old = log mu + log rho, logp = old + log r: exp(logp - old) = r, exp(old - mu) = rho."""
    log_rho, log_r = t(rho).log(), t(r).log()
    rollout_logp = torch.full_like(log_r, rollout)
    old = rollout_logp + log_rho
    return PolicyBatch(logp=(old + log_r).requires_grad_(True), old_logp=old, rollout_logp=rollout_logp,
                       advantages=t(advantages), mask=t(mask))


def loss_and_grad(out, batch):
    (grad,) = torch.autograd.grad(out.loss, batch.logp)
    return out.loss, grad


def random_batch(seed, b=4, length=6, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    rollout = -2 + torch.randn(b, length, generator=g, dtype=F64)
    old = rollout + scale * torch.randn(b, length, generator=g, dtype=F64)
    logp = (old + scale * torch.randn(b, length, generator=g, dtype=F64)).requires_grad_(True)
    advantages = torch.randn(b, 1, generator=g, dtype=F64).expand(b, length).clone()
    mask = (torch.rand(b, length, generator=g) > 0.25).to(F64)
    mask[:, 0] = 1
    return PolicyBatch(logp=logp, old_logp=old, rollout_logp=rollout, advantages=advantages, mask=mask)


# The shared batch: eps 0.2 -> clip [0.8, 1.2]; 7 active tokens; (r, rho) per token.
#   response 0, A = +1: (1.1, 1.0)  (1.3, 0.4)  (0.7, 2.0)  pad
#   response 1, A = -2: (0.9, 6.0)  (0.75, 1.0)  (4.0, 0.55)  (1.05, 2.0)
# Clipped surrogate S = min(r A, clip(r) A): 1.1, 1.2, 0.7 | -1.8, -1.6, -8.0, -2.1
# dS/dlogp (0 where the clip binds): 1.1, 0, 0.7 | -1.8, 0, -8.0, -2.1
R = [[1.1, 1.3, 0.7, 1.0], [0.9, 0.75, 4.0, 1.05]]
RHO = [[1.0, 0.4, 2.0, 1.0], [6.0, 1.0, 0.55, 2.0]]
ADV = [[1.0] * 4, [-2.0] * 4]
MASK = [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_icepop_by_hand():
    # [0.5, 5] masks rho = 0.4 and 6.0; the others weigh S by rho:
    # 1.1 * 1 + 0.7 * 2 - 1.6 * 1 - 8.0 * 0.55 - 2.1 * 2 = -7.7 -> loss 7.7 / 7 = 1.1
    batch = make(R, RHO, ADV, MASK)
    out = get("icepop")(batch)
    loss, grad = loss_and_grad(out, batch)
    assert loss.item() == pytest.approx(1.1, abs=1e-12)
    torch.testing.assert_close(grad, t([[-1.1, 0, -1.4, 0], [0, 0, 4.4, 4.2]]) / 7, rtol=0, atol=1e-12)
    assert out.metrics["icepop/masked_frac"].item() == pytest.approx(2 / 7)
    assert out.metrics["icepop/kept_rho_mean"].item() == pytest.approx((1 + 2 + 1 + 0.55 + 2) / 5)


def test_decoupled_ppo_by_hand():
    # cap 5 masks only rho = 6.0; rho = 0.4 now weighs its clipped S = 1.2 (zero gradient):
    # 1.1 + 0.48 + 1.4 - 1.6 - 4.4 - 4.2 = -7.22 -> loss 7.22 / 7; the denominator keeps all 7 tokens
    batch = make(R, RHO, ADV, MASK)
    out = get("decoupled_ppo")(batch)
    loss, grad = loss_and_grad(out, batch)
    assert loss.item() == pytest.approx(7.22 / 7, abs=1e-12)
    torch.testing.assert_close(grad, t([[-1.1, 0, -1.4, 0], [0, 0, 4.4, 4.2]]) / 7, rtol=0, atol=1e-12)
    assert out.metrics["decoupled_ppo/masked_frac"].item() == pytest.approx(1 / 7)
    # without a cap (older AReaL) the rho = 6 token weighs -1.8 * 6 = -10.8: loss (7.22 + 10.8) / 7
    uncapped = get("decoupled_ppo")(make(R, RHO, ADV, MASK), behav_weight_cap=None)
    assert uncapped.loss.item() == pytest.approx(18.02 / 7, abs=1e-12)


def test_cispo_by_hand_against_mu():
    # the default: the ratio against mu, pi / mu = r rho: 1.1, 0.52, 1.4 | 5.4, 0.75, 2.2, 2.1;
    # eps_low 1, eps_high 4: w = clamp(r rho, 0, 5) -> 5.4 becomes 5; loss = -sum(w A logp) / 7 and
    # d loss / d logp_t = -w_t A_t / 7: -1.1/7, -0.52/7, -1.4/7 | 10/7, 1.5/7, 4.4/7, 4.2/7
    batch = make(R, RHO, ADV, MASK)
    out = get_recipe("cispo").compute_loss(batch)
    loss, grad = loss_and_grad(out, batch)
    w = t([[1.1, 0.52, 1.4, 0], [5.0, 0.75, 2.2, 2.1]])
    assert loss.item() == pytest.approx((-(w * t(ADV) * batch.logp.detach()).sum() / 7).item(), abs=1e-12)
    torch.testing.assert_close(grad, t([[-1.1, -0.52, -1.4, 0], [10, 1.5, 4.4, 4.2]]) / 7, rtol=0, atol=1e-12)
    assert out.metrics["cispo/frac_clipped"].item() == pytest.approx(1 / 7)
    # cispo_old: the ratio against the trainer's recompute, w = clamp(r, 0, 5) = r (no behaviour weight)
    old = get_recipe("cispo_old").compute_loss(batch := make(R, RHO, ADV, MASK))
    _, grad = loss_and_grad(old, batch)
    torch.testing.assert_close(grad, -t([[1.1, 1.3, 0.7, 0], [0.9, 0.75, 4.0, 1.05]]) * t(ADV) / 7, rtol=0, atol=1e-12)


def test_cispo_by_hand_and_its_gradient_direction():
    # against old_logp, eps_low 1, eps_high 2: w = clamp(r, 0, 3) = r except r = 4 -> 3; loss = -sum(w A logp) / 7,
    # d loss / d logp_t = -w_t A_t / 7 on EVERY active token (PPO's clip would zero 1.3, 0.75 and keep 4)
    batch = make(R, RHO, ADV, MASK)
    out = get("cispo")(batch, eps_low=1.0, eps_high=2.0, ratio_against="old")
    loss, grad = loss_and_grad(out, batch)
    w = t([[1.1, 1.3, 0.7, 0], [0.9, 0.75, 3.0, 1.05]])
    expected = -(w * t(ADV) * batch.logp.detach()).sum() / 7
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    torch.testing.assert_close(grad, -w * t(ADV) / 7, rtol=0, atol=1e-12)
    active = t(MASK).bool()
    assert torch.equal(torch.sign(grad[active]), -torch.sign(t(ADV)[active]))  # every token moves with its A
    assert out.metrics["cispo/frac_clipped"].item() == pytest.approx(1 / 7)


def test_cispo_without_bounds_has_the_policy_gradient():
    """With the band [0, inf) CISPO's gradient is the unclipped r A policy gradient."""
    batch = random_batch(1)
    _, grad = loss_and_grad(get("cispo")(batch, eps_low=1.0, eps_high=1e300), batch)
    ratio = (batch.logp - batch.rollout_logp).exp()
    surrogate = -(torch.where(batch.mask.bool(), ratio * batch.advantages, 0.0)).sum() / batch.mask.sum()
    (expected,) = torch.autograd.grad(surrogate, batch.logp)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)


def test_flash_reinforce_by_hand():
    # q = mu(y) = 0.5 everywhere, p = pi_old(y) = 0.5 rho; binary KL(q, p) = -0.5 log(4 p (1 - p)):
    # p 0.5 -> 0, 0.51 -> 2.0e-4, 0.55 -> 5.025e-3. Per response: 1e-4 (kept), 5.025e-3 > 5e-3 (dropped),
    # 2.5e-3 (kept). REINFORCE (r = 1, logp = log p) on the kept: loss -(sum A log p) / 6, gradient -A / 6.
    batch = make([[1.0] * 3] * 3, [[1.0, 1.02, 1.0], [1.1, 1.1, 1.0], [1.1, 1.0, 1.0]], [[1.0] * 3, [-2.0] * 3,
                 [0.5] * 3], [[1, 1, 0]] * 3, rollout=math.log(0.5))
    out = get_recipe("flash_reinforce").compute_loss(batch)
    loss, grad = loss_and_grad(out, batch)
    assert loss.item() == pytest.approx(-(math.log(0.5 * 0.51) + 0.5 * math.log(0.55 * 0.5)) / 6, abs=1e-12)
    torch.testing.assert_close(grad, t([[-1, -1, 0], [0, 0, 0], [-0.5, -0.5, 0]]) / 6, rtol=0, atol=1e-12)
    assert out.metrics["flash_reinforce/dropped_frac"].item() == pytest.approx(2 / 6)
    kl = [-0.5 * math.log(4 * p * (1 - p)) for p in (0.5, 0.51, 0.55, 0.55, 0.55, 0.5)]
    assert out.metrics["flash_reinforce/kl_mean"].item() == pytest.approx(sum(kl) / 6, rel=1e-6)
    # its control keeps the dropped response: -A / 6 = +2/6 on its tokens
    _, grad = loss_and_grad(get_recipe("flash_reinforce_unfiltered").compute_loss(batch), batch)
    torch.testing.assert_close(grad, t([[-1, -1, 0], [2, 2, 0], [-0.5, -0.5, 0]]) / 6, rtol=0, atol=1e-12)


def test_m2po_by_hand():
    # log w (against mu) and A; trust-region tokens: A > 0 with log w > 0, A < 0 with log w < 0
    #   response 0, A = +1: 0.5*, 0.1*, -0.3, pad       response 1, A = -1: -0.4*, 0.2, -0.1*, -0.05*
    # their M2: .25 .01 | .16 .01 .0025, mean .0865 > .04; drop .25 -> .1825/4 = .045625 > .04;
    # drop .16 -> .0225/3 = .0075 <= .04: stop. Loss = -(sum of kept w A) / 7.
    log_w = [[0.5, 0.1, -0.3, 0.0], [-0.4, 0.2, -0.1, -0.05]]
    batch = make([[e(x) for x in row] for row in log_w], [[1.0] * 4] * 2, [[1.0] * 4, [-1.0] * 4], MASK)
    out = get("m2po")(batch)  # ratio against mu; here old = mu
    loss, grad = loss_and_grad(out, batch)
    kept = e(0.1) + e(-0.3) - e(0.2) - e(-0.1) - e(-0.05)
    assert loss.item() == pytest.approx(-kept / 7, abs=1e-12)
    torch.testing.assert_close(grad, t([[0, -e(0.1), -e(-0.3), 0], [0, e(0.2), e(-0.1), e(-0.05)]]) / 7,
                               rtol=0, atol=1e-12)
    assert out.metrics["m2po/masked_frac"].item() == pytest.approx(2 / 7)
    assert out.metrics["m2po/m2_trust_region"].item() == pytest.approx(0.0865)
    assert out.metrics["m2po/m2_trust_region_after"].item() == pytest.approx(0.0075)


def greedy_reference(m2, candidate, tau):
    """Algorithm 1 as a loop: drop the largest remaining candidate while their mean exceeds tau."""
    values = sorted(((m2[i], i) for i in range(len(m2)) if candidate[i]), reverse=True)
    removed = set()
    while values and sum(v for v, _ in values) / len(values) > tau:
        removed.add(values.pop(0)[1])
    return [i in removed for i in range(len(m2))]


@pytest.mark.parametrize("seed", range(20))
def test_m2po_sorted_mask_is_algorithm_1(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 60, (), generator=g))
    m2 = (torch.randn(n, generator=g, dtype=F64) * 0.3).square()
    if seed % 4 == 0:
        m2 = m2.round(decimals=2)  # ties
    candidate = torch.rand(n, generator=g) > 0.4
    tau = [0.0, 0.01, 0.04, 0.2][seed % 4]
    removed = greedy_m2_mask(m2, candidate, tau)
    assert removed.tolist() == greedy_reference(m2.tolist(), candidate.tolist(), tau)


def test_sequence_tis_and_masked_is_by_hand():
    # r = 1 (logp = old) so S = A; rho per token: response 0 (A = +1): 1.2, 1.5 -> prod 1.8;
    # response 1 (A = -1): 0.5, 0.8 -> prod 0.4; a padded token with rho = 100 must not count.
    batch = make([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [[1.2, 1.5, 100.0], [0.5, 0.8, 100.0]],
                 [[1.0] * 3, [-1.0] * 3], [[1, 1, 0], [1, 1, 0]])
    # sequence TIS, cap 2: weights 1.8 and 0.4 -> loss -(2 x 1.8 - 2 x 0.4) / 4 = -0.7
    tis = get_recipe("grpo_seq_tis").compute_loss(batch)
    assert tis.loss.item() == pytest.approx(-0.7, abs=1e-12)
    assert tis.metrics["rollout_is/frac_capped"].item() == 0.0
    # sequence MIS [0.5, 2]: response 1 (0.4) gets weight 0 -> loss -(2 x 1.8) / 4 = -0.9
    mis = get_recipe("grpo_seq_mis").compute_loss(batch)
    assert mis.loss.item() == pytest.approx(-0.9, abs=1e-12)
    assert mis.metrics["rollout_is/frac_masked"].item() == pytest.approx(0.5)
    # composed with token TIS (cap 2): token weights 1.2, 1.5 | 0.5, 0.8 multiply the sequence weights
    both = load_recipes(extra={"both": {"loss": "grpo", "tis": {"cap": 2.0},
                                        "rollout_is": {"level": "sequence", "cap": 2.0}}})["both"]
    expected = -(1.8 * (1.2 + 1.5) - 0.4 * (0.5 + 0.8)) / 4
    assert both.compute_loss(batch).loss.item() == pytest.approx(expected, abs=1e-12)
    # drop_rejected (verl's convention): the rejected response 1 leaves the denominator too,
    # loss -(2 x 1.8) / 2 = -1.8 and d loss / d logp = -1.8 A / 2 on response 0's tokens
    drop = load_recipes(extra={"drop": {"loss": "grpo", "rollout_is": {"level": "sequence", "lower": 0.5,
                                                                       "upper": 2.0, "drop_rejected": True}}})["drop"]
    loss, grad = loss_and_grad(drop.compute_loss(batch), batch)
    assert loss.item() == pytest.approx(-1.8, abs=1e-12)
    torch.testing.assert_close(grad, t([[-0.9, -0.9, 0], [0, 0, 0]]), rtol=0, atol=1e-12)
    # with nothing rejected, dropping changes nothing, bit for bit
    keep, drop = (load_recipes(extra={"r": {"loss": "sat_gspo", "rollout_is": {"level": "token", "upper": 200.0,
                                                                             "drop_rejected": flag}}})["r"]
                  for flag in (False, True))
    assert torch.equal(keep.compute_loss(batch).loss, drop.compute_loss(batch).loss)


@pytest.mark.parametrize("seed", range(5))
def test_disabled_cases_are_their_base_loss_bit_for_bit(seed):
    batch = random_batch(seed)
    grpo, grpo_grad = loss_and_grad(get("grpo")(batch), batch)
    # IcePop with the mask [0, inf] and no rho weighting is GRPO
    off, off_grad = loss_and_grad(get("icepop")(batch, alpha=0.0, beta=math.inf, rho_weight=False), batch)
    assert torch.equal(off, grpo) and torch.equal(off_grad, grpo_grad)
    # decoupled PPO and sequence TIS with mu = pi_old (rho = 1 exactly) are GRPO
    on_policy = PolicyBatch(logp=batch.logp, old_logp=batch.old_logp, rollout_logp=batch.old_logp,
                            advantages=batch.advantages, mask=batch.mask)
    for out in (get("decoupled_ppo")(on_policy), get_recipe("grpo_seq_tis").compute_loss(on_policy),
                get_recipe("grpo_seq_mis").compute_loss(on_policy)):
        loss, grad = loss_and_grad(out, on_policy)
        assert torch.equal(loss, grpo) and torch.equal(grad, grpo_grad)
    # M2PO with tau = inf masks nothing: the unclipped token mean of -w A with w = pi / mu
    m2, m2_grad = loss_and_grad(get("m2po")(batch, tau=math.inf), batch)
    w = (batch.logp - batch.rollout_logp).exp()
    plain = -torch.where(batch.mask.bool(), w * batch.advantages, 0.0).sum() / batch.mask.bool().count_nonzero()
    (plain_grad,) = torch.autograd.grad(plain, batch.logp)
    assert torch.equal(m2, plain) and torch.equal(m2_grad, plain_grad)


@pytest.mark.parametrize("name", NEW_RECIPES + SINCE_AUTUMN)
def test_masks_and_weights_are_detached(name):
    """No gradient reaches old_logp or log mu: masks and weights enter through sg(.)."""
    batch = random_batch(3, scale=0.8)
    leaves = [x.detach().clone().requires_grad_(True) for x in (batch.old_logp, batch.rollout_logp, batch.advantages)]
    attached = PolicyBatch(logp=batch.logp, old_logp=leaves[0], rollout_logp=leaves[1], advantages=leaves[2],
                           mask=batch.mask)
    out = get_recipe(name).compute_loss(attached)
    grads = torch.autograd.grad(out.loss, [batch.logp, *leaves], allow_unused=True)
    assert grads[0].abs().sum() > 0
    assert all(g is None or not g.any() for g in grads[1:3]), name
    assert all(not v.requires_grad and v.dim() == 0 for v in out.metrics.values()), name


@pytest.mark.parametrize("name", NEW_RECIPES + SINCE_AUTUMN)
def test_empty_batch_gives_zero_loss_and_zero_gradient(name):
    batch = random_batch(4)
    empty = PolicyBatch(logp=batch.logp, old_logp=batch.old_logp, rollout_logp=batch.rollout_logp,
                        advantages=batch.advantages, mask=torch.zeros_like(batch.mask))
    out = get_recipe(name).compute_loss(empty)
    loss, grad = loss_and_grad(out, empty)
    assert loss.item() == 0.0 and not grad.any()
    assert all(torch.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("spec, message", [
    ({"loss": "grpo", "rollout_is": {"level": "prefix"}}, "level"),
    ({"loss": "grpo", "rollout_is": {"cap": 0.0}}, "rollout_is cap"),
    ({"loss": "grpo", "rollout_is": {"lower": 3.0, "upper": 2.0}}, "rollout_is lower"),
    ({"loss": "grpo", "rollout_is": {"ceiling": 2.0}}, "rollout_is must be"),
    ({"loss": "icepop", "params": {"alpha": 2.0, "beta": 1.0}}, "beta"),
    ({"loss": "m2po", "params": {"tau": -1.0}}, "tau"),
    ({"loss": "cispo", "params": {"eps_low": 1.5}}, "eps_low"),
    ({"loss": "decoupled_ppo", "params": {"behav_weight_cap": 0.0}}, "behav_weight_cap"),
])
def test_bad_values_are_refused_when_the_recipe_is_read(spec, message):
    with pytest.raises(ValueError, match=message):
        load_recipes(extra={"bad": spec})


def test_offpolicy_diagnostics_by_hand():
    # log rho: response 0: 0, 0 -> log w 0 (w 1); response 1: 1, (pad 5) -> log w 1 (w e); response 2 empty
    old, mu = t([[0.0, 0.0], [1.0, 5.0], [3.0, 3.0]]), torch.zeros(3, 2, dtype=F64)
    mask = t([[1, 1], [1, 0], [0, 0]])
    d = offpolicy_diagnostics(old, mu, mask)
    assert d["offpolicy/ess"].item() == pytest.approx((1 + e(1)) ** 2 / (2 * (1 + e(2))))
    assert d["offpolicy/chi2_token"].item() == pytest.approx((1 + 1 + e(2)) / 3 - 1)
    assert d["offpolicy/chi2_seq"].item() == pytest.approx((1 + e(2)) / 2 - 1)
    assert d["offpolicy/k3_kl"].item() == pytest.approx((e(1) - 1 - 1) / 3)
    # equal weights: ESS 1; one response far off: ESS -> 1/B, in log space without overflow
    assert offpolicy_diagnostics(mu, mu, mask)["offpolicy/ess"].item() == pytest.approx(1.0)
    far = offpolicy_diagnostics(t([[0.0, 0.0], [900.0, 0.0], [0.0, 0.0]]), mu, t([[1, 1], [1, 0], [1, 0]]))
    assert far["offpolicy/ess"].item() == pytest.approx(1 / 3)
    assert all(math.isfinite(v.item()) for v in far.values())
    empty = offpolicy_diagnostics(old, mu, torch.zeros_like(mask))
    assert empty["offpolicy/ess"].item() == 1.0 and empty["offpolicy/k3_kl"].item() == 0.0
    assert ess_lr_scale(torch.tensor(0.25)).item() == pytest.approx(0.5)
    assert ess_lr_scale(torch.tensor(1.0), rho_base=0.5).item() == 1.0


SAT_BASES = {"sat_grpo": "grpo", "sat_gspo": "gspo"}  # SAT's loss -> the loss it contracts
SAT_ONLY = {"alpha", "quantile_scope", "enabled"}  # the parameters SAT adds to its base


def one_difference_control(sat: Recipe) -> dict:
    """The recipe that differs from ``sat`` in SAT alone: its base loss with the ratio against mu."""
    params = {key: value for key, value in sat.params.items() if key not in SAT_ONLY}
    return {**sat.as_dict(), "loss": SAT_BASES[sat.loss], "params": {**params, "ratio_against": "rollout"},
            "table1": None}


def test_field_preset_holds_the_whole_field_on_the_stress_preset():
    from engines.tiny.params import resolve_engine_params
    from grid.config import load

    config = load("workflow/presets/field.yaml")
    recipes = load_recipes()
    table1 = [name for name, recipe in recipes.items() if recipe.table1]
    controls = {"grpo_mu", "gspo_mu", "grpo_mu_r3", "gspo_mu_r3", "sat_fixed", "sat_random"}
    practice = {"grpo_clip_higher", "grpo_sum_norm", "grpo_dr", "grpo_geo_rs", "sapo", "opsm", "dppo_kl",
                "dppo_pkl"}  # issue 26
    assert set(config["recipes"]) == set(table1) | controls | set(NEW_RECIPES) | practice
    # every SAT recipe of the preset has its one-difference control there (with sat_grpo's defaults)
    in_preset = [recipes[name] for name in config["recipes"]]
    for sat in in_preset:
        if sat.loss in SAT_BASES:
            assert one_difference_control(sat) in [{**r.as_dict(), "table1": None} for r in in_preset], sat.name
    assert {"sat_grpo", "grpo_mu"} <= set(config["recipes"])  # sat_fixed's and sat_random's references
    assert config["lags"] == [1, 8] and len(config["seeds"]) >= 5
    assert resolve_engine_params(config["engine_params"])["lr"] == 7e-4
