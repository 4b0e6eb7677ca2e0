"""The grid: expand a (validated) workflow config into runs and resolve each run's config.

A resolved run config is everything an engine needs for one (recipe, lag, seed); its hash is
the run key that names the run in MLflow and guards its directory against a different config.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from stabilizers import get_recipe, load_recipes

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


def run_key(run_config: dict) -> str:
    body = {k: v for k, v in run_config.items() if k != "run_key"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def resolve_run_config(config: dict, recipe: str, lag: int, seed: int, recipes: dict | None = None) -> dict:
    """``recipes``: the loaded recipes, when the caller resolves many runs (loading takes ~8 ms)."""
    check_lag(lag, config.get("lag_mode", "interval"))
    if recipes is None:
        recipes = load_recipes(extra=config.get("extra_recipes") or {})
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
