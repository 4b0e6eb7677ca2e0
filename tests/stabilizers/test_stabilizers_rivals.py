"""The nearest rivals (issue 40): P3O's batch-ESS objective and mu-GRPO's negative-advantage veto,
against numbers worked out by hand in the comments (float64); the disabled veto is its base loss bit
for bit; both trace without a graph break. Formulas: stabilizers/p3o.py and stabilizers/veto.py."""
import math

import pytest
import torch
import torch._dynamo

from stabilizers import PolicyBatch, get, get_recipe, load_recipes

F64 = torch.float64
LN2 = math.log(2)


def batch_from(logp, ratio, advantages, mask):
    """log mu = logp - log r, so that exp(logp - log mu) = r; old_logp = logp (unused by both rivals)."""
    logp = torch.tensor(logp, dtype=F64)
    rollout = logp - torch.tensor(ratio, dtype=F64).log()
    return PolicyBatch(logp=logp.clone().requires_grad_(True), old_logp=logp.clone(), rollout_logp=rollout,
                       advantages=torch.tensor(advantages, dtype=F64), mask=torch.tensor(mask, dtype=F64))


def grad(out, batch):
    (g,) = torch.autograd.grad(out.loss, batch.logp)
    return g


# P3O's batch: 4 active tokens (and a padding column). (p = pi(y), r = pi / mu, A):
#   response 0: (0.5, 1, +1)  (0.5, 2, +1)      response 1: (0.25, 1, -1)  (0.5, 0.5, -1)
P3O = dict(logp=[[math.log(0.5), math.log(0.5), 0.0], [math.log(0.25), math.log(0.5), 0.0]],
           ratio=[[1.0, 2.0, 1.0], [1.0, 0.5, 1.0]], advantages=[[1.0] * 3, [-1.0] * 3],
           mask=[[1, 1, 0], [1, 1, 0]])


def test_p3o_by_hand():
    # e_B = (1 + 2 + 1 + 0.5)^2 / (4 (1 + 4 + 1 + 0.25)) = 20.25 / 25 = 0.81
    # w = min(r, 0.81) = 0.81, 0.81, 0.81, 0.5; capped: the three tokens with r > 0.81
    # k = log r + 1 / r - 1 = 0, ln2 - 0.5, 0, 1 - ln2 (sum 0.5, mean 0.125)
    # sum w A logp = 0.81 (-ln2) + 0.81 (-ln2) + 0.81 (-1)(-2 ln2) + 0.5 (-1)(-ln2) = 0.5 ln2
    # loss = -0.5 ln2 / 4 + (1 - 0.81) 0.125 = -0.125 ln2 + 0.02375
    # d loss / d logp = (-w A + 0.19 (1 - 1 / r)) / 4: -0.2025, -0.2025 + 0.02375, 0.2025, 0.125 - 0.0475
    batch = batch_from(**P3O)
    out = get("p3o")(batch)
    assert out.loss.item() == pytest.approx(-0.125 * LN2 + 0.02375, rel=1e-12)
    torch.testing.assert_close(grad(out, batch), torch.tensor([[-0.2025, -0.17875, 0.0], [0.2025, 0.0775, 0.0]],
                                                               dtype=F64), rtol=1e-12, atol=1e-15)
    assert out.metrics["p3o/ess"].item() == pytest.approx(0.81, rel=1e-12)
    assert out.metrics["p3o/frac_capped"].item() == pytest.approx(0.75)
    assert out.metrics["p3o/kl_behaviour"].item() == pytest.approx(0.125, rel=1e-12)
    assert out.metrics["ratio/mean"].item() == pytest.approx(4.5 / 4)


def test_p3o_on_policy_is_the_score_function_update():
    # r = 1 everywhere: e_B = 1, w = 1 and the KL term has weight 0: loss = -mean(A logp)
    # = -(-ln2 - ln2 + 2 ln2 + ln2) / 4 = -ln2 / 4, gradient -A / 4
    batch = batch_from(**{**P3O, "ratio": [[1.0] * 3, [1.0] * 3]})
    out = get("p3o")(batch)
    assert out.metrics["p3o/ess"].item() == 1.0
    assert out.loss.item() == pytest.approx(-LN2 / 4, rel=1e-12)
    torch.testing.assert_close(grad(out, batch), torch.tensor([[-0.25, -0.25, 0], [0.25, 0.25, 0]], dtype=F64))


class TwoRanks:
    """all_gather as if a second rank held one active token with r = 1 (its sums: 1, 1, 1; its count 1)."""

    def all_gather(self, values):
        return [values, torch.ones_like(values)]


def test_p3o_ess_spans_the_data_parallel_ranks():
    # with the other rank's token: e_B = (4.5 + 1)^2 / (5 (6.25 + 1)) = 30.25 / 36.25
    batch = batch_from(**P3O)
    out = get("p3o")(PolicyBatch(**{**{k: getattr(batch, k) for k in ("logp", "old_logp", "rollout_logp",
                                                                         "advantages", "mask")}, "reduce": TwoRanks()}))
    assert out.metrics["p3o/ess"].item() == pytest.approx(30.25 / 36.25, rel=1e-12)


def test_p3o_empty_batch_gives_zero_loss_and_ess_one():
    batch = batch_from(**{**P3O, "mask": [[0, 0, 0], [0, 0, 0]]})
    out = get("p3o")(batch)
    assert out.loss.item() == 0.0 and out.metrics["p3o/ess"].item() == 1.0
    assert torch.count_nonzero(grad(out, batch)) == 0


# The veto's batch, r = pi / mu per token (all inside mu-GRPO's relaxed clip [0, 5], so S = r A):
#   response 0, A = -1: 1.0  5e-5  0.8  1e-5  1.2    (triggers below 1e-4 at positions 1 and 3: kappa = 1)
#   response 1, A = +1: 1e-6  1.0                     (r < 1e-4 but A > 0: no trigger)
#   response 2, A = -1: 0.9  1.1
VETO_R = [[1.0, 5e-5, 0.8, 1e-5, 1.2], [1e-6, 1.0, 1.0, 1.0, 1.0], [0.9, 1.1, 1.0, 1.0, 1.0]]
VETO_MASK = [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]]
VETO_ADV = [[-1.0] * 5, [1.0] * 5, [-1.0] * 5]
RELAXED = {"loss": "grpo", "params": {"eps_low": 1.0, "eps_high": 4.0, "ratio_against": "rollout"}}


def veto_batch():
    return batch_from(logp=[[-1.0] * 5] * 3, ratio=VETO_R, advantages=VETO_ADV, mask=VETO_MASK)


@pytest.mark.parametrize("scope, vetoed, loss", [
    # kept S = r A, token mean over the kept tokens (the vetoed ones leave the denominator):
    # none vetoed: -(-(1 + 5e-5 + 0.8 + 1e-5 + 1.2) + (1e-6 + 1) - (0.9 + 1.1)) / 9
    (None, [], 4.000059 / 9),
    # S_kappa: positions 2, 3, 4 of response 0: -(-(1 + 5e-5) + 1.000001 - 2) / 6
    ("suffix", [2, 3, 4], 2.000049 / 6),
    # H_kappa = S_kappa minus the trigger at 3: -(-(1 + 5e-5 + 1e-5) + 1.000001 - 2) / 7
    ("non_trigger_suffix", [2, 4], 2.000059 / 7),
    # the whole of response 0: -(1.000001 - 2) / 4
    ("sequence", [0, 1, 2, 3, 4], 0.999999 / 4),
    # the triggers alone: -(-(1 + 0.8 + 1.2) + 1.000001 - 2) / 7
    ("trigger", [1, 3], 3.999999 / 7),
])
def test_veto_scopes_by_hand(scope, vetoed, loss):
    veto = None if scope is None else {"threshold": 1e-4, "scope": scope}
    recipe = load_recipes(extra={"r": {**RELAXED, "veto": veto}})["r"]
    batch = veto_batch()
    out = recipe.compute_loss(batch)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    # d loss / d logp = -r A / kept on the kept tokens, 0 on the vetoed ones and the padding
    kept = torch.tensor(VETO_MASK, dtype=F64)
    kept[0, vetoed] = 0
    expected = -torch.tensor(VETO_R, dtype=F64) * torch.tensor(VETO_ADV, dtype=F64) * kept / kept.sum()
    torch.testing.assert_close(grad(out, batch), expected, rtol=1e-12, atol=1e-18)
    if scope is not None:
        assert out.metrics["veto/trigger_frac"].item() == pytest.approx(2 / 9)
        assert out.metrics["veto/vetoed_frac"].item() == pytest.approx(len(vetoed) / 9)
        assert out.metrics["veto/responses_vetoed"].item() == pytest.approx(1 / 3)


def test_mu_grpo_is_the_relaxed_clip_with_the_suffix_veto():
    recipe = get_recipe("mu_grpo")
    assert recipe.params == RELAXED["params"] and recipe.veto == {"threshold": 1e-4, "scope": "suffix"}
    # its control differs in the veto alone
    assert get_recipe("grpo_mu_relaxed").as_dict() == {k: v for k, v in recipe.as_dict().items() if k != "veto"}
    assert recipe.compute_loss(veto_batch()).loss.item() == pytest.approx(2.000049 / 6, rel=1e-12)


def test_a_veto_that_never_triggers_is_its_base_loss_bit_for_bit():
    batch, again = veto_batch(), veto_batch()
    vetoed = load_recipes(extra={"r": {**RELAXED, "veto": {"threshold": 1e-7}}})["r"].compute_loss(batch)
    base = get_recipe("grpo_mu_relaxed").compute_loss(again)
    assert torch.equal(vetoed.loss, base.loss)
    assert torch.equal(grad(vetoed, batch), grad(base, again))
    assert vetoed.metrics["veto/vetoed_frac"].item() == 0.0


@pytest.mark.parametrize("veto, message", [
    ({"threshold": 0.0}, "veto threshold = 0.0 is outside"),
    ({"threshold": 1e-4, "scope": "prefix"}, "veto scope = 'prefix'; expected one of"),
    ({"cap": 2.0}, "veto must be null or a mapping with keys"),
])
def test_bad_veto_values_are_refused_when_the_recipe_is_read(veto, message):
    with pytest.raises(ValueError, match=message):
        load_recipes(extra={"bad": {**RELAXED, "veto": veto}})


@pytest.mark.parametrize("name", ["mu_grpo", "p3o"])
def test_the_rivals_trace_without_a_graph_break(name):
    recipe = get_recipe(name)
    batch = veto_batch()
    recipe.compute_loss(batch)  # warm: names resolved before tracing
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda b: (lambda out: (out.loss, out.metrics))(recipe.compute_loss(b)))(batch)
    assert (explanation.graph_break_count, explanation.break_reasons) == (0, [])
