"""The registry (a new stabilizer is one new file), recipes, and clear errors on bad input."""
import math
import re
import sys
import textwrap

import pytest
import torch

import stabilizers
from stabilizers import (
    PolicyBatch,
    Recipe,
    SamplerDistribution,
    api,
    available,
    get,
    get_recipe,
    load_recipes,
    parameters,
    recipe_from_dict,
    register,
    validate_batch,
)
from stabilizers.api import ranges

TABLE1 = ["grpo", "gspo", "grpo_r3", "gspo_r3", "grpo_tis", "gspo_tis", "grpo_tis_r3", "gspo_tis_r3",
          "dppo", "sat_grpo", "sat_gspo", "sat_grpo_r3", "sat_gspo_r3"]


def batch(b=2, length=3, **overrides):
    generator = torch.Generator().manual_seed(0)
    tensors = {name: torch.randn(b, length, generator=generator) for name in ("logp", "old_logp", "rollout_logp", "advantages")}
    tensors["mask"] = torch.ones(b, length)
    tensors.update(overrides)
    return PolicyBatch(**tensors)


@pytest.fixture
def plugin_module(scratch, monkeypatch):
    """A stabilizer module in a temporary folder added to the stabilizers package's search path: the
    registry finds it like a file of stabilizers/, and the checkout (where a concurrent
    `snakemake -n` or catalog scan would see it) is never written."""
    name = "_plugin_test"
    (scratch / f"{name}.py").write_text(textwrap.dedent(f'''
        """A test stabilizer: GRPO's surrogate with a scaled advantage."""
        from ._surrogate import aggregate, clip_bounds, clipped_objective, log_ratio
        from .api import LossOutput, ranges, register

        @register("{name}")
        @ranges(scale="(0, inf)", eps_low="[0, 1)", eps_high="[0, inf)")
        def scaled(batch, *, scale: float = 2.0, eps_low: float = 0.2, eps_high: float = 0.2,
                   aggregation: str = "token_mean"):
            ratio = log_ratio(batch, "old").exp()
            objective = clipped_objective(ratio, scale * batch.advantages, *clip_bounds(eps_low, eps_high, ratio))
            return LossOutput(aggregate(objective, batch, aggregation), {{"{name}/scale": ratio.new_tensor(scale)}})
    '''))
    monkeypatch.setattr(stabilizers, "__path__", [*stabilizers.__path__, str(scratch)])
    yield name
    api._REGISTRY.pop(name, None)
    sys.modules.pop(f"stabilizers.{name}", None)
    vars(stabilizers).pop(name, None)


def test_a_new_stabilizer_is_one_new_file(plugin_module):
    b = batch()
    out = get(plugin_module)(b)  # found by name, no other change
    assert plugin_module in available()
    assert parameters(plugin_module) == {"scale": 2.0, "eps_low": 0.2, "eps_high": 0.2, "aggregation": "token_mean"}
    torch.testing.assert_close(out.loss, 2 * get("grpo")(b).loss)
    recipe = recipe_from_dict("scaled3", {"loss": plugin_module, "params": {"scale": 3.0}, "tis": {"cap": 2.0}})
    assert recipe.compute_loss(b).metrics[f"{plugin_module}/scale"].item() == 3.0
    with pytest.raises(ValueError, match=r"no parameter\(s\) \['bogus'\]"):
        get(plugin_module)(b, bogus=1)


def test_duplicate_name_raises_naming_both_definitions():
    def another_grpo(batch):
        raise AssertionError("never called")

    with pytest.raises(ValueError) as error:
        register("grpo")(another_grpo)
    message = str(error.value)
    assert "stabilizer 'grpo' is defined twice" in message
    assert "stabilizers.grpo.grpo" in message and "grpo.py" in message  # the first definition, with its file
    assert "another_grpo" in message and "test_stabilizers_registry.py" in message  # the second
    assert get("grpo").__doc__ == api._REGISTRY["grpo"].__doc__  # the original survives


def no_aggregation(batch, *, eps: float = 0.1):
    raise AssertionError("never called")


def positional_eps(batch, eps=0.1, *, aggregation="token_mean"):
    raise AssertionError("never called")


def no_default(batch, *, eps: float, aggregation="token_mean"):
    raise AssertionError("never called")


def undeclared(batch, *, eps: float = 0.1, aggregation="token_mean"):
    raise AssertionError("never called")


@pytest.mark.parametrize("loss, message", [
    (no_aggregation, r"every loss takes `aggregation` \(token_mean or sample_mean or token_sum_norm\)"),
    (positional_eps, r"\['eps'\] must be keyword-only with a default"),
    (no_default, r"\['eps'\] must be keyword-only with a default"),
    (undeclared, r"declare its value ranges with @ranges"),
])
def test_register_checks_the_contract(loss, message):
    with pytest.raises(ValueError, match=message):
        register("contract_test")(loss)
    assert "contract_test" not in api._REGISTRY


def test_ranges_cover_every_parameter_and_hold_the_defaults():
    with pytest.raises(ValueError, match=r"undeclared: no value range declared for \['eps'\]"):
        ranges()(undeclared)
    with pytest.raises(ValueError, match=r"a default is outside its range: eps = 0.1 is outside \[0.5, 1.0\]"):
        ranges(eps="[0.5, 1]")(undeclared)
    with pytest.raises(ValueError, match=r"ranges declared for \['epsilon'\], which are not its keyword"):
        ranges(eps="[0, 1]", epsilon="[0, 1]")(undeclared)
    with pytest.raises(ValueError, match=r"the range of eps names 'top', which is not a parameter"):
        ranges(eps="[0, top]")(undeclared)
    with pytest.raises(ValueError, match=r"range '0 to 1' is not an interval"):
        ranges(eps="0 to 1")(undeclared)
    checked = register("contract_test")(ranges(eps="(0, 1)")(lambda batch, *, eps=0.1, aggregation="token_mean": eps))
    try:
        assert get("contract_test")(None, eps=0.5) == 0.5
        with pytest.raises(ValueError, match=r"eps = 1 is outside \(0.0, 1.0\)"):
            checked(None, eps=1)
        with pytest.raises(ValueError, match=r"aggregation = 'sum'; expected one of"):
            checked(None, aggregation="sum")
    finally:
        api._REGISTRY.pop("contract_test")


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(KeyError) as error:
        get("sat_grop")
    assert "unknown stabilizer 'sat_grop'" in str(error.value)
    for name in ("grpo", "gspo", "sat_grpo", "sat_gspo", "dppo", "sat_fixed", "sat_random"):
        assert name in str(error.value)
    with pytest.raises(KeyError, match="unknown recipe 'sat'; available: .*sat_grpo"):
        get_recipe("sat")


def test_every_param_has_a_default_and_unknown_params_raise():
    assert parameters("sat_grpo") == {"eps_low": 0.2, "eps_high": 0.2, "alpha": 0.9, "quantile_scope": "microbatch",
                                      "ratio_against": "rollout", "enabled": True, "aggregation": "token_mean"}
    assert parameters("dppo")["delta"] == 1e-3
    assert parameters("grpo") == {"eps_low": 0.2, "eps_high": 0.2, "dual_clip_c": None, "ratio_against": "old",
                                  "aggregation": "token_mean"}
    with pytest.raises(ValueError, match=r"'sat_grpo' has no parameter\(s\) \['alpah'\]; it accepts .*'alpha'"):
        get("sat_grpo")(batch(), alpah=0.9)


@pytest.mark.parametrize("field", ["old_logp", "rollout_logp", "advantages", "mask"])
def test_mismatched_shapes_name_the_tensor(field):
    with pytest.raises(ValueError, match=rf"PolicyBatch.{field} has shape \(2, 4\), expected \(2, 3\) like logp"):
        validate_batch(batch(**{field: torch.ones(2, 4)}))
    with pytest.raises(ValueError, match=r"PolicyBatch.logp must have shape \[B, L\], got \(6,\)"):
        validate_batch(PolicyBatch(*(torch.ones(6) for _ in range(5))))
    weighted = batch().with_token_weight(torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"PolicyBatch.token_weight has shape \(3, 2\)"):
        validate_batch(weighted)


@pytest.mark.parametrize("field", ["logp", "old_logp", "rollout_logp", "advantages", "mask"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_inputs_name_the_tensor_and_position(field, bad):
    values = torch.zeros(2, 3)
    values[1, 2] = bad
    with pytest.raises(ValueError, match=rf"PolicyBatch.{field} has 1 NaN/inf value\(s\), first at \(1, 2\)"):
        validate_batch(batch(**{field: values}))


def test_a_finite_batch_whose_sum_overflows_is_accepted():
    big = torch.full((2, 3), 3e38)  # the sum is inf in float32, every value is finite
    b = batch(advantages=torch.ones(2, 3), old_logp=big, logp=big)
    validate_batch(b)
    assert math.isfinite(get("grpo")(b).loss.item())


@pytest.mark.parametrize("name,params,message", [
    ("grpo", {"eps_low": 1.5}, r"eps_low = 1.5 is outside \[0.0, 1.0\]"),
    ("grpo", {"eps_low": -0.1}, r"eps_low = -0.1 is outside"),
    ("sat_grpo", {"eps_high": -0.2}, r"eps_high = -0.2 is outside \[0.0, inf\)"),
    ("sat_grpo", {"alpha": 0.0}, r"alpha = 0.0 is outside \(0.0, 1.0\]"),
    ("sat_gspo", {"alpha": 1.5}, r"alpha = 1.5 is outside \(0.0, 1.0\]"),
    ("sat_random", {"alpha": -1}, r"alpha = -1 is outside"),
    ("sat_grpo", {"alpha": "0.9"}, r"alpha = '0.9' is not a number"),
    ("dppo", {"delta": 0.0}, r"delta = 0.0 is outside \(0.0, inf\)"),
    ("grpo", {"dual_clip_c": 1.0}, r"dual_clip_c = 1.0 is outside \(1.0, inf\)"),
    ("sat_fixed", {"threshold": -0.01}, r"threshold = -0.01 is outside"),
    ("grpo", {"ratio_against": "mu"}, r"ratio_against = 'mu'; expected one of \['old', 'rollout'\]"),
    ("gspo", {"aggregation": "seq_mean"}, r"aggregation = 'seq_mean'; expected one of \['token_mean', 'sample_mean', 'token_sum_norm'\]"),
    ("sat_grpo", {"quantile_scope": "rank"}, r"quantile_scope = 'rank'; expected one of \['microbatch', 'global'\]"),
])
def test_params_out_of_range(name, params, message):
    with pytest.raises(ValueError, match=message):
        get(name)(batch(), **params)


def test_recipes_are_the_papers():
    recipes = load_recipes()
    field = {"m2po", "icepop", "decoupled_ppo", "cispo", "cispo_old", "grpo_seq_tis", "grpo_seq_mis"}  # beyond.md
    controls = {"grpo_mu", "gspo_mu", "grpo_mu_r3", "gspo_mu_r3", "grpo_dualclip", "sat_fixed", "sat_random"}
    practice = {"grpo_clip_higher", "grpo_sum_norm", "grpo_dr", "grpo_geo_rs", "sapo", "opsm", "dppo_kl",
                "dppo_pkl"}  # issue 26
    rivals = {"p3o", "mu_grpo", "grpo_mu_relaxed"}  # issue 40 (tests/stabilizers/test_stabilizers_rivals.py)
    autumn = {"ipo", "score_centering", "score_centering_tis", "score_centering_mis", "score_centering_top4", "estr",
              "topr"}  # issue 50 (tests/stabilizers/test_stabilizers_autumn.py)
    sources = {"ipo_pr3418", "ipo_score_centering", "topr_token", "icepop_prime", "grpo_seqmean_tis",
               "grpo_mu_seq_mask3", "flash_reinforce", "flash_reinforce_unfiltered"}  # issue 62 (test_stabilizers_conformance.py)
    assert set(TABLE1) | controls | field | practice | rivals | autumn | sources == set(recipes)
    # FlashREINFORCE's baseline is a mean reward without the std division, the nearest the tiny engine has
    assert [name for name, recipe in recipes.items() if not recipe.std_normalization] == [
        "grpo_dr", "flash_reinforce", "flash_reinforce_unfiltered"]
    assert recipes["grpo_dr"].as_dict()["params"] == recipes["grpo_sum_norm"].as_dict()["params"]
    assert "std_normalization" not in recipes["grpo_sum_norm"].as_dict()  # on by default: old run keys unchanged
    for name in TABLE1:
        recipe = recipes[name]
        assert recipe.table1 == name.replace("_tis", "").replace("_r3", "")
        assert recipe.routing_replay == name.endswith("_r3")
        assert recipe.tis == ({"cap": 2.0} if "_tis" in name else None)
        params = {**parameters(recipe.loss), **recipe.params}
        assert (params["eps_low"], params["eps_high"]) == (0.2, 0.2)
    assert recipes["dppo"].params["delta"] == 1e-3
    assert recipes["sat_grpo"].params["alpha"] == 0.9 and recipes["sat_gspo"].params["alpha"] == 0.9
    for base in ("grpo", "gspo"):  # the ratio against pi_old, the controls' against mu
        assert parameters(base)["ratio_against"] == "old" and "ratio_against" not in recipes[base].params
        assert recipes[f"{base}_mu"].params["ratio_against"] == "rollout"
        assert recipes[f"{base}_mu_r3"] == Recipe(f"{base}_mu_r3", **{**recipes[f"{base}_mu"].as_dict(), "routing_replay": True})
    # GSPO and SAT-GSPO weigh each response once (GSPO's objective, SAT's Eq. 38), the token losses each token
    assert parameters("gspo")["aggregation"] == parameters("sat_gspo")["aggregation"] == "sample_mean"
    assert {parameters(name)["aggregation"] for name in ("grpo", "sat_grpo", "dppo", "cispo")} == {"token_mean"}
    assert recipes["grpo_dualclip"].params["dual_clip_c"] == 3.0
    # the field's defaults (each module's docstring cites its source)
    assert recipes["m2po"].params == {"tau": 0.04}
    assert (recipes["icepop"].params["alpha"], recipes["icepop"].params["beta"]) == (0.5, 5.0)
    assert recipes["decoupled_ppo"].params["behav_weight_cap"] == 5.0
    assert (recipes["cispo"].params["eps_low"], recipes["cispo"].params["eps_high"]) == (1.0, 4.0)
    assert parameters("cispo")["ratio_against"] == "rollout"  # the asynchronous form, pi / mu
    assert recipes["cispo_old"].params == {**recipes["cispo"].params, "ratio_against": "old"}
    assert recipes["grpo_seq_tis"].rollout_is == {"level": "sequence", "cap": 2.0}
    assert recipes["grpo_seq_mis"].rollout_is == {"level": "sequence", "lower": 0.5, "upper": 2.0}
    # prime-rl's IPO defaults by date: PR #3586 (today's) and PR #3418 (with its KL term, no cap)
    assert recipes["ipo"].params == {"eps": 0.3, "max_importance_ratio": 1e4, "kl_coef": 0.0}
    assert recipes["ipo_pr3418"].params == {"eps": 0.1, "max_importance_ratio": math.inf, "kl_coef": 1e-3}
    assert recipes["ipo_score_centering"].params == {"eps": 0.3, "max_importance_ratio": 1e4}
    # the field since autumn (issue 62): prime-rl's IcePop band, NeMo-RL's sequence-mean TIS, TRL's AsyncGRPO gate
    assert recipes["icepop_prime"].params == {"ratio_low": 0.2, "ratio_high": 5.0}
    assert recipes["grpo_seqmean_tis"].rollout_is == {**recipes["grpo_seq_tis"].rollout_is, "level": "geometric"}
    assert recipes["grpo_mu_seq_mask3"].params == recipes["grpo_mu"].params
    assert recipes["grpo_mu_seq_mask3"].rollout_is == {"level": "sequence", "lower": 0.0, "upper": 3.0, "reweight": False}
    assert recipes["flash_reinforce"].params == {"delta": 5e-3}  # FlashREINFORCE's KL threshold
    assert recipes["flash_reinforce_unfiltered"].as_dict() == {**recipes["flash_reinforce"].as_dict(),
                                                               "params": {"delta": math.inf}}
    assert {recipes[f"score_centering{suffix}"].params["weight"] for suffix in ("", "_tis", "_mis")} == {"none", "tis", "mis"}
    for recipe in recipes.values():  # each one runs and gives a finite loss
        b = batch()
        uniform = torch.full((*b.logp.shape, 4), -math.log(4))  # the sampler, for Score Centering and ESTR
        b = PolicyBatch(logp=b.logp.requires_grad_(True), old_logp=b.old_logp, rollout_logp=b.rollout_logp,
                        advantages=b.advantages, mask=b.mask,
                        sampler=SamplerDistribution(logq=uniform, logp=uniform, entropy=uniform[..., 0] * -1))
        out = recipe.compute_loss(b, step_seed=3)
        out.loss.backward()
        assert math.isfinite(out.loss.item()) and torch.isfinite(b.logp.grad).all(), recipe.name


def test_sat_random_recipe_draws_per_step():
    recipe = get_recipe("sat_random")
    d = torch.tensor([[0.05] * 9 + [0.5]] * 2)
    b = batch(b=2, length=10, logp=d - 1, rollout_logp=torch.full_like(d, -1.0), advantages=torch.ones_like(d),
              mask=torch.ones_like(d))
    losses = {recipe.compute_loss(b, step_seed=s).loss.item() for s in range(20)}
    assert len(losses) > 1  # the step seed reaches the draw
    assert recipe.compute_loss(b, step_seed=5).loss.item() == recipe.compute_loss(b, step_seed=5).loss.item()


@pytest.mark.parametrize("spec,message", [
    ({"loss": "grpo", "eps": 0.2}, r"recipe 'bad' \(<dict>\): unknown key\(s\) \['eps'\]"),
    ({"params": {}}, r"recipe 'bad' \(<dict>\): missing 'loss'"),
    ({"loss": "grpo", "params": {"alpha": 0.9}}, r"recipe 'bad' \(<dict>\): stabilizer 'grpo' has no parameter\(s\) \['alpha'\]"),
    ({"loss": "grpoo"}, r"recipe 'bad' \(<dict>\): unknown stabilizer 'grpoo'; available: "),
    ({"loss": "grpo", "tis": {"cap": 2.0, "lower": 0.5}}, r"tis must be null or a mapping with keys \['cap', 'floor'\]"),
    ({"loss": "grpo", "tis": {"cap": 0.0}}, r"recipe 'bad' \(<dict>\): tis cap = 0.0 is outside"),
    ({"loss": "sat_grpo", "params": {"alpha": 1.2}}, r"recipe 'bad' \(<dict>\): alpha = 1.2 is outside"),
    ({"loss": "grpo", "routing_replay": "yes"}, r"routing_replay must be false, true"),
    ({"loss": "grpo", "std_normalization": "no"}, r"std_normalization must be true or false, got 'no'"),
    ("grpo", r"recipe 'bad' \(<dict>\): expected a mapping, got str"),
])
def test_bad_recipes_are_rejected_when_read(spec, message):
    with pytest.raises(ValueError, match=message):
        recipe_from_dict("bad", spec)


def test_recipe_files_and_config_recipes(tmp_path):
    path = tmp_path / "recipes.yaml"
    path.write_text("mine: {loss: sat_grpo, params: {alpha: 0.95}}\nother: {loss: grpo, params: {eps_hi: 0.3}}\n")
    with pytest.raises(ValueError, match=re.escape(f"recipe 'other' ({path}): stabilizer 'grpo' has no parameter(s) ['eps_hi']")):
        load_recipes(path)
    path.write_text("mine: {loss: sat_grpo, params: {alpha: 0.95}}\n")
    assert load_recipes(path, extra={"theirs": {"loss": "dppo", "params": {"delta": 0.15}}})["theirs"].params == {"delta": 0.15}
    with pytest.raises(ValueError, match=re.escape(f"recipe 'mine' is defined in {path} and again in the config")):
        load_recipes(path, extra={"mine": {"loss": "grpo"}})
    with pytest.raises(ValueError, match=r"recipe 'x' \(config\): unknown key\(s\) \['lr'\]"):
        load_recipes(path, extra={"x": {"loss": "grpo", "lr": 1e-6}})
    with pytest.raises(FileNotFoundError, match="recipe file not found"):
        load_recipes(tmp_path / "missing.yaml")
    path.write_text("- grpo\n")
    with pytest.raises(ValueError, match="expected a mapping of recipe name"):
        load_recipes(path)
