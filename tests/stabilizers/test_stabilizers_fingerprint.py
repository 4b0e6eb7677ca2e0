"""A recipe's fingerprint on the canned batch (stabilizers._fingerprint): the same recipe gives the
same fingerprint, every recipe its own, and a recipe whose module runs another loss is caught."""
from __future__ import annotations

import dataclasses

import pytest

from stabilizers import api, fingerprint, load_recipes, recipe_from_dict, recipe_from_named_dict, validate_batch
from stabilizers._fingerprint import canned_batch

RECIPES = load_recipes()


def test_the_canned_batch_is_valid_and_fixed():
    batch = canned_batch()
    validate_batch(batch)
    assert batch.mask.sum(-1).tolist() == [12, 8, 4, 10, 1]
    assert fingerprint(RECIPES["grpo"]) == fingerprint(RECIPES["grpo"])


def test_every_recipe_has_its_own_loss_on_the_canned_batch():
    """Only the R3 twins and Dr.GRPO's pair (grpo_dr = grpo_sum_norm with std-free advantages) share
    a loss (routing replay and the advantages' std are engine switches): a swapped loss, a parameter
    that did not reach it, or a switch left off changes the fingerprint."""
    by_loss: dict[tuple, set[str]] = {}
    for name, recipe in RECIPES.items():
        taken = fingerprint(recipe)
        by_loss.setdefault((taken["loss"], taken["gradient"]), set()).add(name)
    shared = [names for names in by_loss.values() if len(names) > 1]
    # and mu_grpo's pair: the canned batch's ratios are near 1, so mu-GRPO's veto (pi / mu < 1e-4 with
    # A < 0) never fires there; the veto's metrics still tell the two apart (its effect: test_stabilizers_rivals)
    # and ipo with m2po: on the canned batch both remove the one token at log pi/mu = 1 and nothing else (no
    # other token has |pi - mu| > 0.1, or 0.3 for today's eps, or a large M2), and weigh the rest by pi/mu
    # (IPO's cap 1e4 does not bind); ipo_pr3418's KL term tells it apart; reshaping the
    # batch would change every recorded fingerprint, so their metrics tell them apart
    twins = [{name.removesuffix("_r3"), name} for name in RECIPES if name.endswith("_r3")] + \
        [{"grpo_sum_norm", "grpo_dr"}, {"grpo_mu_relaxed", "mu_grpo", "icepop_prime"}, {"ipo", "m2po"}]
    assert sorted(map(sorted, shared)) == sorted(map(sorted, twins))
    assert fingerprint(RECIPES["mu_grpo"])["metrics"] != fingerprint(RECIPES["grpo_mu_relaxed"])["metrics"]
    assert fingerprint(RECIPES["ipo"])["metrics"] != fingerprint(RECIPES["m2po"])["metrics"]
    # prime-rl's IcePop keeps every canned token (pi/mu in [0.2, 5]) and weighs it by pi/mu, as the relaxed clip
    # [0, 5] does: its metrics tell it apart
    assert fingerprint(RECIPES["icepop_prime"])["metrics"] != fingerprint(RECIPES["grpo_mu_relaxed"])["metrics"]


def test_a_loss_that_reads_the_sampler_gets_it_and_its_gradient_counts(monkeypatch):
    """Score Centering and ESTR get the canned sampler they need (the others none, so that their recorded
    fingerprints stay); the centering term's gradient reaches pi's log-probs over the vocabulary, and a
    loss that drops it is caught."""
    assert canned_batch().sampler is None
    batch = canned_batch(("sampler_logp", "sampler_entropy"))
    validate_batch(batch)
    assert batch.sampler.logq.shape == batch.sampler.logp.shape == (5, 12, 6)
    recorded = fingerprint(RECIPES["score_centering"])
    centering = api._REGISTRY["score_centering"]

    def without_centering_gradient(batch, **params):
        sampler = api.SamplerDistribution(logq=batch.sampler.logq, logp=batch.sampler.logp.detach())
        return centering(dataclasses.replace(batch, sampler=sampler), **params)

    monkeypatch.setitem(api._REGISTRY, "score_centering", without_centering_gradient)  # the planted fault
    ran = fingerprint(RECIPES["score_centering"])
    assert ran["loss"] == recorded["loss"] and ran["gradient"] != recorded["gradient"]


def test_a_run_config_recipe_has_the_fingerprint_of_its_source():
    recipe = RECIPES["sat_gspo_r3"]
    again = recipe_from_named_dict({"name": recipe.name, **recipe.as_dict()}, "run config")
    assert fingerprint(again) == fingerprint(recipe)
    # a parameter that did not reach the loss is another fingerprint
    clip_higher = recipe_from_dict("grpo_high", {"loss": "grpo", "params": {"eps_high": 0.28}})
    assert fingerprint(clip_higher)["loss"] != fingerprint(RECIPES["grpo"])["loss"]


def test_a_module_that_runs_another_loss_is_caught(monkeypatch):
    recorded = fingerprint(RECIPES["gspo"])  # what the train job would record
    monkeypatch.setitem(api._REGISTRY, "gspo", api._REGISTRY["grpo"])  # the planted fault
    ran = fingerprint(RECIPES["gspo"])
    assert ran["digest"] != recorded["digest"]
    assert ran["loss"] == fingerprint(RECIPES["grpo"])["loss"]  # gspo's parameters, grpo's loss


@pytest.mark.parametrize("name", ["sat_random", "sat_grpo"])
def test_metrics_are_part_of_the_digest(name):
    out = fingerprint(RECIPES[name])
    assert set(out) == {"loss", "gradient", "metrics", "digest"}
    assert out["metrics"] != fingerprint(RECIPES["grpo_mu"])["metrics"]


def test_metrics_change_the_digest_where_loss_and_gradient_do_not(monkeypatch):
    """A module with grpo's loss and gradient but other diagnostics (a metric that no longer reports what
    it says): the recorded digest differs, so aggregate refuses the run."""
    recorded = fingerprint(RECIPES["grpo"])
    grpo = api._REGISTRY["grpo"]

    def grpo_with_other_metrics(batch, **params):
        out = grpo(batch, **params)
        return api.LossOutput(out.loss, {name: value + 1 for name, value in out.metrics.items()})

    monkeypatch.setitem(api._REGISTRY, "grpo", grpo_with_other_metrics)  # the planted fault
    ran = fingerprint(RECIPES["grpo"])
    assert (ran["loss"], ran["gradient"]) == (recorded["loss"], recorded["gradient"])
    assert ran["metrics"] != recorded["metrics"] and ran["digest"] != recorded["digest"]
