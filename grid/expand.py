"""The grid: expand a (validated) workflow config into runs, resolve each run's config, and refuse run
folders that hold another config.

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
from harness.run import RunDir
from harness.run_config import BASE_MODEL
from stabilizers import Recipe, get_recipe, load_recipes, parameters, switch_defaults


def grid_dir(config: dict) -> Path:
    return Path(config.get("results_dir", "results")) / config["grid"]


def expand(config: dict) -> list[tuple[str, int, int]]:
    """Every (recipe, lag, seed) of the grid, in config order."""
    return [(recipe, int(lag), int(seed))
            for recipe in config["recipes"] for lag in config["lags"] for seed in config["seeds"]]


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
    that one grid crosses it; knobs of the grid-wide base model are refused by grid.config)."""
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


def refuse_changed_runs(run_configs: dict[Path, dict]) -> None:
    """Run identity from the files, before any job: every run folder that holds a config.json of
    another run key than the config's (``run_configs``: run folder -> resolved run config) is refused,
    in one ValueError naming each run, both keys and what differs. Snakemake's own rerun triggers
    live in .snakemake/, which a copied results folder or a fresh clone lacks; these files do not."""
    refusals = [refusal for folder, run_config in run_configs.items()
                if (refusal := RunDir(folder).config_refusal(run_config))]
    if refusals:
        raise ValueError(f"{len(refusals)} run folder(s) of this grid hold runs of another config, so no job "
                         f"was started and nothing was deleted:\n  " + "\n  ".join(refusals))


