"""The run's config, typed: what a resolved run config must hold (``check_run``), ``RunConfig`` for the
training process (the engine's checks included) and ``PinnedRun`` for the stages after it. The grid's
expansion writes these configs (grid.expand.resolve_run_config); every stage reads them through here."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from harness import engine as engines
from harness.identity import run_key
from harness.lag import check_lag
from harness.queue_lag import QUEUE_KEYS
from stabilizers import Recipe, recipe_from_named_dict

# The grid's prepared base model as a run config names it: a folder relative to the grid folder
# (<results_dir>/<grid>), so that moving or renaming results/ keeps every run key and eval key.
BASE_MODEL = "base"



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


@functools.lru_cache(maxsize=None)
def recipe_fingerprint(recipe_json: str) -> dict:
    """stabilizers.fingerprint of a run config's resolved recipe (as JSON text: the cache key)."""
    from stabilizers import fingerprint  # imports torch

    return fingerprint(recipe_from_named_dict(json.loads(recipe_json), "run config 'recipe'"))


@dataclass(frozen=True)
class PinnedRun:
    """A run's config.json as the stages after training read it (aggregate, track): the fields
    grid.expand.resolve_run_config wrote, typed once per run by the engine-independent checks
    (harness.run_config.check_run). Not ``RunConfig``: a later stage reads what a run was started with, and
    needs neither the engine's parameter checks nor its inputs (the base model)."""

    recipe: Recipe
    engine: str
    engine_params: MappingProxyType  # as the run pinned them: resolved, the preset's name kept
    lag: int
    lag_mode: str
    seed: int
    steps: int
    eval_every: int
    run_key: str
    identity_keys: MappingProxyType  # every ``*_key`` hash the file holds (run_key among them)

    @classmethod
    def of(cls, run_config: dict, source: str | Path) -> PinnedRun:
        """ValueError naming ``source`` (the config.json) and the key that is missing or wrong."""
        try:
            recipe = check_run(run_config)
        except ValueError as error:
            raise ValueError(f"{source}: {error.args[0]}") from None
        if not run_config.get("run_key"):
            raise ValueError(f"{source} has no run_key")
        return cls(recipe=recipe, engine=run_config["engine"],
                   engine_params=MappingProxyType(dict(run_config.get("engine_params") or {})),
                   lag=run_config["lag"], lag_mode=run_config["lag_mode"], seed=run_config["seed"],
                   steps=run_config["steps"], eval_every=run_config["eval_every"], run_key=run_config["run_key"],
                   identity_keys=MappingProxyType({key: value for key, value in run_config.items()
                                                   if key.endswith("_key") and isinstance(value, str)}))


@dataclass(frozen=True)
class RunConfig:
    """A resolved run config (grid.expand.resolve_run_config), checked: the harness's checks
    (harness.run_config.check_run), the engine's parameter checks and the engine's check_run. Built once
    per training process (``RunConfig.check``) and handed to the engine."""

    raw: MappingProxyType  # the config as config.json pins it, run key included
    engine: engines.Engine
    recipe: Recipe
    engine_params: MappingProxyType  # resolved by the engine
    grid: str
    lag: int
    lag_mode: str
    seed: int
    steps: int
    eval_every: int
    base_model: Path | None  # the grid's prepared base model (engines with a prepare step), resolved
    run_key: str

    @classmethod
    def check(cls, run_config: dict, grid_dir: str | Path = ".") -> "RunConfig":
        """The typed, checked run config; ValueError (or FileNotFoundError for a missing input of the
        engine) naming the key. A stale or missing run key is recomputed. ``grid_dir``: the grid
        folder (RunDir.grid_dir), which a relative base_model (harness.run_config.BASE_MODEL) is under."""
        try:
            engine = engines.get(run_config.get("engine"))
        except KeyError as error:
            raise ValueError(f"run config 'engine': {error.args[0]}") from None
        raw = {**run_config, "run_key": run_key(run_config)}
        recipe = check_run(raw)
        typed = cls(raw=MappingProxyType(raw), engine=engine, recipe=recipe,
                    engine_params=MappingProxyType(engine.resolve_params(raw.get("engine_params") or {})),
                    grid=raw.get("grid", ""), lag=raw["lag"], lag_mode=raw["lag_mode"], seed=raw["seed"],
                    steps=raw["steps"], eval_every=raw["eval_every"],
                    base_model=Path(grid_dir) / raw["base_model"] if raw.get("base_model") else None, run_key=raw["run_key"])
        engines.check_supplies(engine, recipe.name, recipe.loss)
        if engine.check_run is not None:
            engine.check_run(typed)
        return typed

    def as_dict(self) -> dict:
        return dict(self.raw)
