"""The grid: expand a (validated) workflow config into runs and resolve each run's config.

A resolved run config is everything an engine needs for one (recipe, lag, seed), written out
in full: the engine's parameters resolved by the engine (a preset expanded to its values), the
stabilizer's every parameter with its default, the TIS weight's too. Its hash is the run key that
names the run in MLflow and guards its directory against a different config, so a changed preset
or default changes the key (and reruns the train job) like a changed config value does.
"""
from __future__ import annotations

from pathlib import Path

from harness import engine as engines
from harness.identity import run_key
from harness.lag import check_lag
from harness.queue_lag import QUEUE_KEYS
from stabilizers import Recipe, get_recipe, load_recipes, parameters, recipe_from_named_dict, switch_defaults

# The grid's prepared base model as a run config names it: a folder relative to the grid folder
# (<results_dir>/<grid>), so that moving or renaming results/ keeps every run key and eval key.
BASE_MODEL = "base"


def grid_dir(config: dict) -> Path:
    return Path(config.get("results_dir", "results")) / config["grid"]


def expand(config: dict) -> list[tuple[str, int, int]]:
    """Every (recipe, lag, seed) of the grid, in config order."""
    return [(recipe, int(lag), int(seed))
            for recipe in config["recipes"] for lag in config["lags"] for seed in config["seeds"]]


def check_run(run_config: dict) -> Recipe:
    """The engine-independent checks of a resolved run config; returns its recipe."""
    for key in ("engine", "recipe", "lag", "lag_mode", "seed", "steps", "eval_every"):
        if key not in run_config:
            raise ValueError(f"run config is missing {key!r}")
    recipe = recipe_from_named_dict(run_config["recipe"], "run config 'recipe'")  # unknown loss/params -> ValueError
    check_lag(run_config["lag"], run_config["lag_mode"])
    if run_config["lag_mode"] == "queue" and sorted(run_config.get("lag_queue") or {}) != sorted(QUEUE_KEYS):
        raise ValueError(f"run config 'lag_queue' must hold {list(QUEUE_KEYS)} in lag_mode queue")
    for key in ("steps", "eval_every", "seed"):
        value = run_config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise ValueError(f"run config {key!r} must be an integer >= {0 if key == 'seed' else 1}, got {value!r}")
    return recipe


def resolved_recipe(recipe: Recipe) -> dict:
    """The recipe as a run config holds it: every parameter of its loss and of its weights (TIS,
    rollout IS) and masks (the veto) with its default unless the recipe sets it. Read from source: no torch import."""
    spec = recipe.as_dict()
    spec["params"] = {**parameters(recipe.loss), **recipe.params}
    if recipe.tis is not None:
        spec["tis"] = {**switch_defaults("tis"), **recipe.tis}
    if recipe.rollout_is is not None:
        spec["rollout_is"] = {**switch_defaults("rollout_is"), **recipe.rollout_is}
    if recipe.veto is not None:
        spec["veto"] = {**switch_defaults("veto"), **recipe.veto}
    return {"name": recipe.name, **spec}


def recipe_engine_params(config: dict, recipe: str) -> dict:
    """The engine_params of ``recipe``'s runs, before the engine resolves them: the grid's, updated
    by the recipe's own (config key recipe_engine_params: e.g. a rollout precision per recipe, so
    that one grid crosses it; knobs of the grid-wide base model are refused by harness.config)."""
    return {**(config.get("engine_params") or {}), **(config.get("recipe_engine_params") or {}).get(recipe, {})}


def resolve_run_config(config: dict, recipe: str, lag: int, seed: int, recipes: dict | None = None,
                       engine_params: dict | None = None) -> dict:
    """The run config of one run of a validated ``config``. ``recipes`` (the loaded recipes) and
    ``engine_params`` (the engine's resolution of recipe_engine_params(config, recipe)): when the
    caller resolves many runs, so that each is done once."""
    check_lag(lag, config["lag_mode"])
    if recipes is None:
        recipes = load_recipes(extra=config.get("extra_recipes") or {}, check_values=False)  # values: at train
    if engine_params is None:
        engine_params = engines.get(config["engine"]).resolve_params(recipe_engine_params(config, recipe))
    run_config = {
        "grid": config["grid"],
        "engine": config["engine"],
        "recipe": resolved_recipe(get_recipe(recipe, recipes)),
        "lag": lag,
        "lag_mode": config["lag_mode"],
        "seed": seed,
        "steps": int(config["steps"]),
        "eval_every": int(config["eval_every"]),
        "engine_params": dict(engine_params),
        "base_model": BASE_MODEL,
    }
    if config["lag_mode"] == "queue":  # only then: every other run's config (and key) is unchanged
        run_config["lag_queue"] = {key: config["lag_queue"][key] for key in QUEUE_KEYS}
    run_config["run_key"] = run_key(run_config)
    return run_config
