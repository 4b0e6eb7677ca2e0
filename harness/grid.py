"""The grid: expand a (validated) workflow config into runs and resolve each run's config.

A resolved run config is everything an engine needs for one (recipe, lag, seed); its hash is
the run key that names the run in MLflow and guards its directory against a different config.
"""
from __future__ import annotations

from pathlib import Path

from harness.identity import run_key
from stabilizers import Recipe, get_recipe, load_recipes, recipe_from_dict

LAG_MODES = ("interval", "constant")


def run_dir(config: dict, recipe: str, lag: int, seed: int) -> Path:
    return grid_dir(config) / "runs" / recipe / f"lag{lag}" / f"seed{seed}"


def grid_dir(config: dict) -> Path:
    return Path(config.get("results_dir", "results")) / config["grid"]


def expand(config: dict) -> list[tuple[str, int, int]]:
    """Every (recipe, lag, seed) of the grid, in config order."""
    return [(recipe, int(lag), int(seed))
            for recipe in config["recipes"] for lag in config["lags"] for seed in config["seeds"]]


def check_lag(lag, mode: str) -> None:
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 1:
        raise ValueError(f"lag must be an integer >= 1, got {lag!r}")
    if mode not in LAG_MODES:
        raise ValueError(f"lag_mode must be one of {list(LAG_MODES)}, got {mode!r}")


def check_run(run_config: dict) -> Recipe:
    """The engine-independent checks of a resolved run config; returns its recipe."""
    for key in ("engine", "recipe", "lag", "lag_mode", "seed", "steps", "eval_every"):
        if key not in run_config:
            raise ValueError(f"run config is missing {key!r}")
    spec = run_config["recipe"]
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"run config 'recipe' must be a mapping with a 'name', got {spec!r}")
    body = {k: v for k, v in spec.items() if k != "name"}
    recipe = recipe_from_dict(spec["name"], body, "run config")  # unknown loss/params -> ValueError
    check_lag(run_config["lag"], run_config["lag_mode"])
    for key in ("steps", "eval_every", "seed"):
        value = run_config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise ValueError(f"run config {key!r} must be an integer >= {0 if key == 'seed' else 1}, got {value!r}")
    return recipe


def resolve_run_config(config: dict, recipe: str, lag: int, seed: int, recipes: dict | None = None) -> dict:
    """``recipes``: the loaded recipes, when the caller resolves many runs (loading takes ~8 ms)."""
    check_lag(lag, config.get("lag_mode", "interval"))
    if recipes is None:
        recipes = load_recipes(extra=config.get("extra_recipes") or {}, check_values=False)  # values: at train
    resolved = get_recipe(recipe, recipes)
    run_config = {
        "grid": config["grid"],
        "engine": config["engine"],
        "recipe": {"name": resolved.name, **resolved.as_dict()},
        "lag": lag,
        "lag_mode": config.get("lag_mode", "interval"),
        "seed": seed,
        "steps": int(config["steps"]),
        "eval_every": int(config["eval_every"]),
        "engine_params": dict(config.get("engine_params") or {}),
        "base_model": str(grid_dir(config) / "base"),
    }
    run_config["run_key"] = run_key(run_config)
    return run_config
