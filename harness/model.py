"""The config model: typed, read-only views of a checked workflow config, built once per process.

    config = Config.build(harness.config.validate(raw))    # the Snakefile does this once
    config.runs                # every (recipe, lag, seed), in config order
    config.run_config(run)     # the resolved run config of one run (its hash is the run key)
    config.eval.job_settings() # exactly what each run's evaluate job reads

Every default is the schema's (workflow/schemas/config.schema.yaml) and every check is
harness.config's: these classes only give the checked values names and types, and say which
settings each stage reads, so that a stage is rerun only when something it reads changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import engines
from harness.grid import expand, grid_dir, resolve_run_config
from stabilizers import load_recipes

Run = tuple[str, int, int]  # (recipe, lag, seed)


@dataclass(frozen=True)
class Eval:
    """The config's eval section."""

    tasks: tuple[str, ...]
    selection_task: str | None
    k: int
    temperature: float
    top_p: float
    max_gen_toks: int | None
    fixed_step: int | None
    seed: int
    backend: str | None
    server: MappingProxyType
    data: MappingProxyType
    problems: MappingProxyType
    batch_size: int

    @classmethod
    def build(cls, section: dict) -> "Eval":
        return cls(tasks=tuple(section["tasks"]), selection_task=section["selection_task"], k=section["k"],
                   temperature=section["temperature"], top_p=section["top_p"],
                   max_gen_toks=section["max_gen_toks"], fixed_step=section["fixed_step"], seed=section["seed"],
                   backend=section["backend"], server=MappingProxyType(dict(section["server"])),
                   data=MappingProxyType(dict(section.get("data") or {})),
                   problems=MappingProxyType(dict(section.get("problems") or {})),
                   batch_size=section["batch_size"])

    @property
    def scored_tasks(self) -> list[str]:
        """Scored on every checkpoint: the test tasks, then the split that selects the checkpoint."""
        extra = [self.selection_task] if self.selection_task and self.selection_task not in self.tasks else []
        return [*self.tasks, *extra]

    def job_settings(self) -> dict:
        """What a run's evaluate job reads to score the scored_tasks: sampling, seed, back end,
        server, data files and those tasks' problem counts. Not fixed_step (aggregation reads it),
        nor an unscored task's problem count: changing them reruns no evaluate job. One dict for
        all tasks, since one model per checkpoint scores them all; a task's eval key
        (harness.identity.eval_key) reads only its own problem count, so changing that count
        reruns the job but re-scores only that task."""
        settings = {"k": self.k, "temperature": self.temperature, "top_p": self.top_p,
                    "max_gen_toks": self.max_gen_toks, "seed": self.seed, "backend": self.backend,
                    "server": dict(self.server), "data": dict(self.data), "batch_size": self.batch_size}
        problems = {task: self.problems[task] for task in self.scored_tasks if task in self.problems}
        if problems:
            settings["problems"] = problems
        return settings


@dataclass(frozen=True)
class Config:
    """A checked workflow config (harness.config.validate), with its runs resolved."""

    raw: MappingProxyType  # the checked config, defaults filled in (what aggregate and track read)
    grid: str
    grid_dir: Path
    engine: engines.Engine
    engine_params: MappingProxyType  # resolved by the engine: a preset expanded to its values
    recipes: tuple[str, ...]
    lags: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    eval_every: int
    eval: Eval
    run_configs: MappingProxyType  # Run -> resolved run config

    @classmethod
    def build(cls, config: dict) -> "Config":
        engine = engines.get(config["engine"])
        engine_params = engine.resolve_params(config["engine_params"])
        # once: resolving a 1,000-run grid takes ms. Names and parameter names are checked without
        # importing torch; value ranges when jobs start (the Snakefile's onstart: check_recipe_values).
        recipes = load_recipes(extra=config["extra_recipes"], check_values=False)
        run_configs = {run: resolve_run_config(config, *run, recipes=recipes, engine_params=engine_params)
                       for run in expand(config)}
        return cls(raw=MappingProxyType(config), grid=config["grid"], grid_dir=grid_dir(config), engine=engine,
                   engine_params=MappingProxyType(engine_params), recipes=tuple(config["recipes"]),
                   lags=tuple(config["lags"]), seeds=tuple(config["seeds"]), steps=config["steps"],
                   eval_every=config["eval_every"], eval=Eval.build(config["eval"]),
                   run_configs=MappingProxyType(run_configs))

    @property
    def runs(self) -> list[Run]:
        return list(self.run_configs)

    def run_config(self, run: Run) -> dict:
        return self.run_configs[run]

    def prepare_params(self) -> dict:
        """What the engine's grid-wide prepare step reads of the resolved engine params."""
        return {key: self.engine_params[key] for key in self.engine.prepare_keys}


# --- claims: the config's `claims` section (analysis.claims answers them; docs/statistics.md) ----
# Self-contained: defaults live in the schema, the tests in analysis/; harness.config calls
# claim_errors among its semantic checks, so a claim outside the grid stops before any job runs.

@dataclass(frozen=True)
class Claim:
    """One declared claim: a comparison, its endpoint and the smallest effect that matters."""

    name: str  # unique label, the claim's row in table.md / table.csv / summary.json
    kind: str  # staleness_cost | cost_difference | recipes | collapse
    recipe: str
    lag: int
    expect: str  # greater | less | equivalent: the claimed sign of the contrast, or |contrast| < margin
    smallest_effect: float  # fraction of the score (or of the collapse rate); the margin of "equivalent"
    metric: str  # auc | fixed | best | selected (unused by collapse claims)
    versus: str | None  # the other recipe; None for staleness_cost
    versus_lag: int | None  # collapse only: the other cell's lag (default: lag)

    @classmethod
    def build(cls, section: dict) -> "Claim":
        versus_lag = section.get("versus_lag", section["lag"]) if section["kind"] == "collapse" else None
        return cls(name=section["name"], kind=section["kind"], recipe=section["recipe"], lag=section["lag"],
                   expect=section["expect"], smallest_effect=float(section["smallest_effect"]),
                   metric=section["metric"], versus=section.get("versus"), versus_lag=versus_lag)

    def cells(self, reference_lag: int) -> list[tuple[float, str, int]]:
        """(weight, recipe, lag) of the cells whose weighted seed means make the contrast."""
        if self.kind == "staleness_cost":
            return [(1.0, self.recipe, self.lag), (-1.0, self.recipe, reference_lag)]
        if self.kind == "cost_difference":
            return [(1.0, self.recipe, self.lag), (-1.0, self.recipe, reference_lag),
                    (-1.0, self.versus, self.lag), (1.0, self.versus, reference_lag)]
        return [(1.0, self.recipe, self.lag), (-1.0, self.versus, self.versus_lag or self.lag)]


def claims(config: dict) -> tuple[Claim, ...]:
    """The checked config's claims, typed."""
    return tuple(Claim.build(section) for section in config.get("claims") or [])


def claim_errors(config: dict) -> list[str]:
    """Claims that name a recipe or lag outside the grid, repeat a name, or compare a staleness
    cost at the reference lag (the grid's smallest, where it is 0 by definition)."""
    messages, names, outside = [], set(), False
    reference_lag = min(config["lags"])
    for i, claim in enumerate(claims(config)):
        key = f"config key 'claims[{i}]"
        if claim.name in names:
            messages.append(f"{key}.name': {claim.name!r} is declared twice")
        names.add(claim.name)
        for field, grid_key in (("recipe", "recipes"), ("versus", "recipes"), ("lag", "lags"), ("versus_lag", "lags")):
            value = getattr(claim, field)
            if value is not None and value not in config[grid_key]:
                outside = True
                messages.append(f"{key}.{field}' ({claim.name}): {value!r} is not one of the grid's {grid_key} "
                                f"{config[grid_key]}")
        if claim.kind in ("staleness_cost", "cost_difference") and claim.lag == reference_lag:
            messages.append(f"{key}.lag' ({claim.name}): a staleness cost is measured against lag "
                            f"{reference_lag}, the grid's smallest; claim it at a larger lag")
        if claim.kind != "collapse" and "versus_lag" in config["claims"][i]:
            messages.append(f"{key}.versus_lag' ({claim.name}): only a collapse claim compares two lags")
        if claim.kind != "collapse" and claim.metric == "selected" and not config["eval"].get("selection_task"):
            messages.append(f"{key}.metric' ({claim.name}): 'selected' needs eval.selection_task")
    if outside:
        messages.append("config key 'claims': a grid narrowed on the command line (-C recipes=... lags=...) "
                        "answers other questions: restate its claims, or pass claims=[] (exploratory only)")
    return messages
