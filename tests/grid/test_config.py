"""grid.config: the workflow config is checked against the schema and the names it refers to."""
from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from grid.config import (
    SCHEMA,
    TASKS_DIR,
    ConfigError,
    available_tasks,
    key_path,
    load,
    validate,
)
from grid.jobs import job_resources, retype_cli_values, rule_resources
from grid.settings import Config
from harness import engine as engines
from stabilizers import load_recipes
from tests.support.paths import ROOT

DEMO = yaml.safe_load(open("tests/support/interval_grid.yaml"))


def demo(**changes) -> dict:
    config = copy.deepcopy(DEMO)
    config.update(changes)
    return config


def rejected(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate(config)
    return str(info.value)


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(yaml.safe_load(SCHEMA.read_text()))


def test_demo_config_is_valid_and_answers_the_papers_question():
    config = validate(load("config.yaml"))
    assert config["engine"] == "tiny" and config["lags"] == [1, 8] and len(config["seeds"]) >= 3
    assert config["baseline"] in config["recipes"]
    # issue 24's claims: (a) GRPO's cost, (b) SAT's cost against its fixed-clip counterpart's, (c) the
    # control that differs from SAT-GSPO in the clip alone (GSPO against mu), (d) an equivalence
    claims = {(c["kind"], c["recipe"], c.get("versus"), c["expect"]) for c in config["claims"]}
    assert ("staleness_cost", "grpo", None, "less") in claims
    assert ("cost_difference", "sat_gspo", "gspo", "greater") in claims
    assert ("cost_difference", "sat_gspo", "gspo_mu", "greater") in claims
    assert any(expect == "equivalent" for *_, expect in claims)
    recipes = load_recipes()
    assert recipes["gspo_mu"].params.get("ratio_against") == "rollout"


def test_defaults_are_filled_and_the_input_is_not_changed():
    config = demo()
    del config["results_dir"], config["lag_mode"], config["collapse"]
    config["eval"] = {"tasks": ["tiny_test"]}
    before = copy.deepcopy(config)
    out = validate(config)
    assert config == before
    assert out["results_dir"] == "results" and out["lag_mode"] == "interval"
    assert out["collapse"] == {"fraction": 0.5, "confirm": 2}
    assert out["eval"]["k"] == 8 and out["eval"]["selection_task"] is None and out["eval"]["fixed_step"] is None
    assert out["extra_recipes"] == {} and out["resources"] == {}


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"recipes": ["grpo", "no_such_recipe"]}, "recipes[1]", "unknown recipe 'no_such_recipe'"),
    ({"lags": [1, -1]}, "lags[1]", "less than the minimum of 0"),
    ({"lags": [1, 2.5]}, "lags[1]", "not of type 'integer'"),
    ({"lags": [1, "8"]}, "lags[1]", "not of type 'integer'"),
    ({"lags": []}, "lags", "non-empty"),
    ({"seeds": []}, "seeds", "non-empty"),
    ({"seeds": [0, 0]}, "seeds", "non-unique"),
    ({"collapse": {"fraction": 0}}, "collapse.fraction", "less than or equal to the minimum of 0"),
    ({"collapse": {"fraction": 1}}, "collapse.fraction", "greater than or equal to the maximum of 1"),
    ({"collapse": {"fraction": 1.5}}, "collapse.fraction", "greater than or equal to the maximum of 1"),
    ({"eval": {"tasks": ["tiny_test", "no_such_task"]}}, "eval.tasks[1]", "unknown eval task 'no_such_task'"),
    ({"eval": {"tasks": ["tiny_test"], "selection_task": "nope"}}, "eval.selection_task", "unknown eval task"),
    ({"eval": {"tasks": []}}, "eval.tasks", "non-empty"),
    ({"baseline": "gspo_tis"}, "baseline", "not one of the grid's recipes"),
    ({"engine": "verl"}, "engine", "is not one of"),
    ({"lag_mode": "sometimes"}, "lag_mode", "is not one of"),
    ({"steps": 0}, "steps", "less than the minimum of 1"),
    ({"grid": "a/b"}, "grid", "does not match"),
    ({"typo_key": 1}, "typo_key", "unknown key"),
    ({"eval": {"tasks": ["tiny_test"], "kk": 8}}, "eval.kk", "unknown key"),
    ({"eval": {"tasks": ["tiny_test"], "fixed_step": 31}}, "eval.fixed_step", "not an evaluated step"),
    ({"eval": {"tasks": ["tiny_test"], "fixed_step": 4000}}, "eval.fixed_step", "not an evaluated step"),
    ({"resources": {"train": {"gpus": 8}}}, "resources.train.gpus", "unknown key"),
    ({"resources": {"trian": {"gpu": 8}}}, "resources.trian", "unknown key"),
    ({"extra_recipes": {"mine": {"loss": "no_such_loss"}}}, "extra_recipes", "no_such_loss"),
    ({"extra_recipes": {"grpo": {"loss": "grpo"}}}, "extra_recipes", "again in the config"),
    ({"engine_params": {"preset": "huge"}}, "engine_params", "preset"),
    ({"engine_params": {"preset": "demo", "lr": -1}}, "engine_params", "engine_params.lr"),
    ({"engine": "slime", "engine_params": {"lr": 1e-6}}, "engine_params", "slime engine_params missing"),
    ({"eval_every": 200}, "eval_every", "more than steps=120"),
    ({"eval": {"tasks": ["tiny_test"], "problems": {"tiny_tset": 8}}}, "eval.problems.tiny_tset", "unknown eval task"),
    ({"eval": {"tasks": ["tiny_test"], "backend": "vllm"}}, "eval.backend", "is not one of"),
    ({"eval": {"tasks": ["tiny_test"], "seed": -1}}, "eval.seed", "less than the minimum of 0"),
    ({"side_by_side": {"grid": "demo"}}, "side_by_side.grid", "'demo' is this grid itself"),
    ({"side_by_side": {"grid": "../demo"}}, "side_by_side.grid", "does not match"),
    ({"side_by_side": {"label": "constant lag"}}, "side_by_side.grid", "missing (required)"),
    ({"side_by_side": {"grid": "demo_c", "lable": "c"}}, "side_by_side.lable", "unknown key"),
    ({"side_by_side": "demo_c"}, "side_by_side", "not of type 'object'"),
])
def test_bad_config_is_rejected_naming_the_key(change, key, words):
    message = rejected(demo(**change))
    assert f"config key {key!r}" in message
    assert words in message


def test_missing_required_keys_are_named():
    config = demo()
    del config["seeds"], config["baseline"]
    message = rejected(config)
    assert "config key 'seeds': missing" in message and "config key 'baseline': missing" in message


def test_every_problem_is_reported_at_once():
    message = rejected(demo(lags=[-1], seeds=[], collapse={"fraction": 2}))
    assert all(f"config key {key!r}" in message for key in ("lags[0]", "seeds", "collapse.fraction"))


def test_a_config_recipe_can_join_the_grid():
    extra = {"grpo_wide": {"loss": "grpo", "params": {"eps_low": 0.3, "eps_high": 0.3}}}
    config = validate(demo(recipes=["grpo", "grpo_wide"], extra_recipes=extra, claims=[]))
    assert config["extra_recipes"] == extra


def test_side_by_side_null_unsets_a_presets():
    """workflow/presets/tuned_field.yaml's untuned twin: -C side_by_side=null (else it would name itself)."""
    preset = ROOT / "workflow" / "presets" / "tuned_field.yaml"
    assert Config.build(load(preset)).beside_folder.path.name == "tuned_field_defaults"
    with pytest.raises(ConfigError, match="'side_by_side.grid': 'tuned_field_defaults' is this grid itself"):
        load(preset, {"tuning": None, "grid": "tuned_field_defaults"})
    assert Config.build(load(preset, {"tuning": None, "grid": "tuned_field_defaults", "side_by_side": None})).beside_folder is None


def test_fixed_step_on_an_evaluated_step_is_accepted():
    for step in (DEMO["eval_every"], DEMO["steps"]):
        assert validate(demo(eval={**DEMO["eval"], "fixed_step": step}))["eval"]["fixed_step"] == step


def test_task_names_agree_with_lm_eval():
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    assert available_tasks() == set(manager.all_subtasks)
    assert {"aime24_avg8", "tiny_val", "tiny_test"} <= available_tasks()


def test_task_names_come_from_the_yaml_task_key(tmp_path):
    (tmp_path / "a.yaml").write_text("task: alpha\nprocess_results: !function utils.f\n")
    (tmp_path / "_template.yaml").write_text("output_type: generate_until\n")
    assert available_tasks(tmp_path) == {"alpha"}
    with pytest.raises(ConfigError, match="config key 'eval.tasks\\[0\\]': unknown eval task 'tiny_test'"):
        validate(demo(), tasks_dir=tmp_path)


def test_key_path():
    assert key_path(["lags", 1]) == "lags[1]"
    assert key_path(["eval", "tasks", 0]) == "eval.tasks[0]"
    assert key_path([]) == ""


def test_cli_values_get_their_yaml_types_back():
    # What snakemake's -C gives for `lags=[1,8]`, `eval={selection_task: null, k: 4}`, `grid=demo`.
    given = {"lags": ["1", "8"], "eval": {"selection_task": "null", "k": "4", "top_p": "0.9"}, "grid": "demo",
             "recipes": ["grpo", "sat_gspo"], "steps": 20}
    assert retype_cli_values(given) == {"lags": [1, 8], "eval": {"selection_task": None, "k": 4, "top_p": 0.9},
                                        "grid": "demo", "recipes": ["grpo", "sat_gspo"], "steps": 20}


def test_load_applies_overrides_and_names_a_missing_file(tmp_path):
    assert load("config.yaml", {"seeds": [7]})["seeds"] == [7]
    with pytest.raises(ConfigError, match="config file not found"):
        load(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load(tmp_path / "list.yaml")


def test_resources_per_engine_and_overrides():
    table1 = yaml.safe_load(open("workflow/presets/table1.yaml"))
    on_slime = {"engine": "slime", "engine_params": table1["engine_params"], "eval": table1["eval"]}
    tiny, slime = validate(demo()), validate(demo(**on_slime))
    assert "gpu" not in rule_resources(tiny, "train")
    assert rule_resources(slime, "train")["gpu"] >= 1 and "threads" not in job_resources(slime, "train")
    custom = validate(demo(**on_slime, resources={"train": {"gpu": 4, "slurm_partition": "h200"}}))
    assert job_resources(custom, "train")["gpu"] == 4
    assert job_resources(custom, "train")["slurm_partition"] == "h200"
    assert job_resources(custom, "train")["runtime"] == engines.get("slime").resources["train"]["runtime"]


def test_planning_does_not_import_torch():
    """Checking the config and resolving every run (what `snakemake -n` does) never imports torch;
    recipe value ranges are checked separately, when jobs are about to start."""
    import subprocess
    import sys
    code = ("import sys, yaml; from grid.config import validate; from grid.expand import expand, resolve_run_config;"
            "c = validate(yaml.safe_load(open('config.yaml')));"
            "[resolve_run_config(c, *run) for run in expand(c)];"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_recipe_values_are_checked_when_read_and_when_jobs_start():
    from grid.config import check_recipe_values
    # a declared range (stabilizers._ranges) is checked when the config is read, without torch
    with pytest.raises(ConfigError, match=r"config key 'extra_recipes': recipe 'bad' \(config\): alpha = 1.5 is outside"):
        validate(demo(recipes=["grpo", "bad"], claims=[], extra_recipes={"bad": {"loss": "sat_grpo", "params": {"alpha": 1.5}}}))
    # a bound the code derives (verl's lower = 1 / upper) by running the recipe, when jobs start
    config = validate(demo(recipes=["grpo", "bad"], claims=[], extra_recipes={"bad": {"loss": "grpo", "rollout_is": {"upper": 0.5}}}))
    with pytest.raises(ConfigError, match=r"recipe 'bad' \(config 'recipes'\): lower = 2.0 is outside \[0.0, 0.5\]"):
        check_recipe_values(config)
    check_recipe_values(demo())


# --- claims: a name that exists nowhere is refused; a real recipe or lag outside a narrowed grid is not

GOOD_CLAIM = {"name": "ok", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
              "smallest_effect": 0.05}


@pytest.mark.parametrize("claim, message", [
    ({"recipe": "nope"}, "config key 'claims[1].recipe' (bad): unknown recipe 'nope'; available: "),
    ({"kind": "recipes", "versus": "nope"}, "config key 'claims[1].versus' (bad): unknown recipe 'nope'"),
    ({"lag": -2}, "config key 'claims[1].lag' (bad): -2 is not a lag"),
    ({"kind": "collapse", "versus": "grpo", "versus_lag": -1}, "config key 'claims[1].versus_lag' (bad): -1 is not a lag"),
    ({"kind": "recipes"}, "config key 'claims[1].versus': missing (required)"),
    ({"versus_lag": 1}, "config key 'claims[1].versus_lag' (bad): only a collapse claim compares two lags"),
    ({"lag": 1}, "config key 'claims[1].lag' (bad): a staleness cost is measured against lag 1"),
    ({"smallest_effect": 0}, "config key 'claims[1].smallest_effect'"),
    ({"name": "ok"}, "config key 'claims[1].name': 'ok' is declared twice"),
    ({"kind": "collapse", "versus": "grpo", "planning_spread": 0.04}, "config key 'claims[1].planning_spread' (bad): a "
     "spread of per-seed contrasts is a score's"),
    ({"planning_spread": 0}, "config key 'claims[1].planning_spread'"),
])
def test_a_claim_that_cannot_be_meant_is_refused_naming_its_key(claim, message):
    with pytest.raises(ConfigError) as error:
        load("config.yaml", {"claims": [GOOD_CLAIM, {**GOOD_CLAIM, "name": "bad", **claim}]})
    assert message in str(error.value)


def test_the_readmes_narrowed_grid_keeps_the_demos_claims_unchanged():
    """README, "Two commands": -C steps=40 'seeds=[0]' 'recipes=[grpo,sat_grpo]'. The demo's claims
    name gspo, gspo_mu and sat_gspo, which this grid leaves out: they pass, handed on as declared
    (the report says which it could not test)."""
    declared = yaml.safe_load(open("config.yaml"))["claims"]
    config = load("config.yaml", {"steps": 40, "seeds": [0], "recipes": ["grpo", "sat_grpo"]})
    assert {c["recipe"] for c in declared} - set(config["recipes"])  # the case this test is about
    assert [{k: c[k] for k in d} for c, d in zip(config["claims"], declared)] == declared
    assert len(config["claims"]) == len(declared)


@pytest.mark.parametrize("claim", [
    {"lag": 4},  # a lag this grid (lags 1, 8) does not run
    {"recipe": "m2po"},  # a registered recipe this grid does not run
    {"kind": "collapse", "versus": "gspo", "versus_lag": 2},
    {"kind": "cost_difference", "recipe": "mine", "versus": "sat_grpo"},  # the config's own recipe, not in the grid
])
def test_a_claim_on_a_real_recipe_or_lag_outside_the_grid_passes(claim):
    extra = {"mine": {"loss": "grpo", "params": {"eps_high": 0.28}}}
    config = load("config.yaml", {"claims": [{**GOOD_CLAIM, **claim}], "extra_recipes": extra})
    assert config["claims"][0] == {"metric": "auc", **GOOD_CLAIM, **claim}
