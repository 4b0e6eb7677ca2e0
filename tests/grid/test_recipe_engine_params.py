"""Recipe-level engine overrides (config key recipe_engine_params): how one grid crosses an engine
setting such as the rollout precision (workflow/presets/sources.yaml), checked naming the key."""
import pytest

from grid.claims import claims
from grid.config import ConfigError, load
from grid.settings import Config


def test_an_override_reaches_only_its_recipes_runs():
    plain = Config.build(load("config.yaml"))
    crossed = Config.build(load("config.yaml", {"recipe_engine_params": {"gspo": {"rollout_dtype": "float32"}}}))
    assert crossed.run_config(("gspo", 8, 0))["engine_params"]["rollout_dtype"] == "float32"
    assert crossed.run_config(("gspo", 8, 0))["run_key"] != plain.run_config(("gspo", 8, 0))["run_key"]
    for run in plain.runs:  # every other run is the very run it was (same key: same folder, same results)
        if run[0] != "gspo":
            assert crossed.run_config(run) == plain.run_config(run)
    assert crossed.engine_params["rollout_dtype"] == "bfloat16"  # the grid's own setting is unchanged


@pytest.mark.parametrize("overrides, message", [
    ({"nope": {"rollout_dtype": "float32"}}, "config key 'recipe_engine_params.nope': unknown recipe 'nope'"),
    ({"gspo": {"warmstart_steps": 5}}, "config key 'recipe_engine_params.gspo': ['warmstart_steps'] are the whole grid's"),
    ({"gspo": {"preset": "demo"}}, "config key 'recipe_engine_params.gspo': ['preset'] are the whole grid's"),
    ({"gspo": {"rollout_dtype": "int8"}}, "config key 'recipe_engine_params.gspo': engine_params.rollout_dtype must be"),
    ({"gspo": {"no_such_knob": 1}}, "config key 'recipe_engine_params.gspo': engine_params has unknown key(s)"),
])
def test_a_bad_override_is_refused_naming_its_key(overrides, message):
    with pytest.raises(ConfigError) as error:
        load("config.yaml", {"recipe_engine_params": overrides})
    assert message in str(error.value)


def test_a_preset_narrowed_to_fewer_recipes_keeps_their_overrides():
    """-C recipes=[...] leaves the other recipes' overrides in the config: they are known, not errors."""
    narrowed = Config.build(load("workflow/presets/sources.yaml", {"recipes": ["grpo_fp32", "grpo_bf16"],
                                                                   "baseline": "grpo_bf16", "claims": []}))
    assert [narrowed.run_config((recipe, 0, 0))["engine_params"]["rollout_dtype"] for recipe in narrowed.recipes] == \
        ["float32", "bfloat16"]
    assert {case["engine_params"]["rollout_dtype"] for case in narrowed.null_check_params()["cases"]} == \
        {"float32", "bfloat16"}  # the null check reads the grid's runs only


def test_the_sources_preset_crosses_precision_replay_and_lag():
    model = Config.build(load("workflow/presets/sources.yaml"))
    cells = {(model.run_config((recipe, 0, 0))["engine_params"]["rollout_dtype"],
              bool(model.run_config((recipe, 0, 0))["recipe"].get("routing_replay")),
              model.run_config((recipe, 0, 0))["recipe"]["loss"], "_mu" in recipe) for recipe in model.recipes}
    assert len(cells) == len(model.recipes) == 3 * 2 * 4  # every recipe a distinct (precision, replay, loss)
    assert model.lags == (0, 1, 8) and len(model.runs) == 24 * 3 * 10  # every seed the schedule may reach
    assert {case["engine_params"]["rollout_dtype"] for case in model.null_check_params()["cases"]} == \
        {"float32", "bfloat16", "float16"}
    assert {type(c).kind for c in claims(dict(model.raw))} == {"interaction", "trend"}
