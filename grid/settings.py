"""The typed config: read-only views of a checked workflow config, one class per section, a
docstring per field, built once per process.

    config = Config.build(grid.config.validate(raw))    # the Snakefile does this once
    config.runs                # every (recipe, lag, seed), in config order
    config.run_config(run)     # the resolved run config of one run (its hash is the run key)
    config.eval.job_settings() # exactly what each run's evaluate job reads
    config.collapse.fraction   # what aggregation reads
    config.claims              # the declared claims, typed (grid.claims.Claim)
    config.seeding             # the seed schedule this grid runs (grid.claims.Seeding), or None

Every default is the schema's (workflow/schemas/config.schema.yaml) and every check is
grid.config's: these classes only give the checked values names and types, and say which
settings each stage reads, so that a stage is rerun only when something it reads changed. A
section's fields are read from the checked dict by name (``_section``): a new key of a section is
its schema entry, a field here, and the code that reads it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from grid.claims import Claim, Family, Seeding, claims
from grid.expand import expand, grid_dir, recipe_engine_params, resolve_run_config
from grid.folder import GridDir
from grid.tuning import Tuning, confirmation_config, trainable_config
from harness import engine as engines
from stabilizers import load_recipes

Run = tuple[str, int, int]  # (recipe, lag, seed)


def _frozen(value):
    """A checked value made read-only: mappings as MappingProxyType, lists as tuples."""
    if isinstance(value, dict):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _section(cls, section: dict):
    """``cls`` (a dataclass of this module) from its checked config section, field by field (the
    schema gives every field a value or a default)."""
    return cls(**{field.name: _frozen(section[field.name]) for field in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Eval:
    """The config's ``eval`` section: what every checkpoint is scored on, and how."""

    tasks: tuple[str, ...]
    """lm-eval task names (eval/tasks/*.yaml) scored on every checkpoint; the first that is not the
    selection task is the test task the table reports."""
    selection_task: str | None
    """The task whose score selects the checkpoint reported on the test task; None = no selection."""
    k: int
    """Samples per problem: scores are avg@k (and pass@k, maj@k)."""
    temperature: float
    """Sampling temperature of evaluation (0 = greedy)."""
    top_p: float
    """Nucleus sampling mass of evaluation."""
    max_gen_toks: int | None
    """Generation length limit; None = the task's own."""
    fixed_step: int | None
    """The pre-declared step of the fixed-step score; None = the last step (read by aggregation only)."""
    seed: int
    """Seed of evaluation's sampling."""
    backend: str | None
    """The eval back end that scores checkpoints; None = the engine's own (Engine.eval_backend)."""
    server: MappingProxyType
    """Settings of the server back end (url, model, launch, transport)."""
    data: MappingProxyType
    """Local data files per task family, e.g. {aime24: /path/aime24.jsonl}."""
    problems: MappingProxyType
    """Problems per task (a prefix of the task's data), e.g. for a quick look; a task not named: all."""
    batch_size: int
    """Generation batch size of the tiny back end (its sampling seeds are per batch)."""

    @classmethod
    def build(cls, section: dict) -> "Eval":
        return _section(cls, section)

    @property
    def test_task(self) -> str:
        """The task the scores are reported on: the first of tasks that is not the selection task."""
        tasks = [task for task in self.tasks if task != self.selection_task]
        if not tasks:
            raise ValueError(f"eval.tasks must name a test task besides the selection task {self.selection_task!r}")
        return tasks[0]

    @property
    def scored_tasks(self) -> list[str]:
        """Scored on every checkpoint: the test tasks, then the split that selects the checkpoint."""
        extra = [self.selection_task] if self.selection_task and self.selection_task not in self.tasks else []
        return [*self.tasks, *extra]

    def as_dict(self) -> dict:
        """The section as the checked config holds it (every field, plain JSON values)."""
        return {field.name: thawed(getattr(self, field.name)) for field in dataclasses.fields(self)}

    def job_settings(self) -> dict:
        """What a run's evaluate job reads to score the scored_tasks: sampling, seed, back end,
        server, data files and those tasks' problem counts. Not fixed_step (aggregation reads it),
        nor an unscored task's problem count: changing them reruns no evaluate job. One dict for
        all tasks, since one model per checkpoint scores them all; a task's eval key
        (harness.identity.eval_key) reads only its own problem count, so changing that count
        reruns the job but re-scores only that task."""
        settings = {"k": self.k, "temperature": self.temperature, "top_p": self.top_p,
                    "max_gen_toks": self.max_gen_toks, "seed": self.seed, "backend": self.backend,
                    "server": thawed(self.server), "data": dict(self.data), "batch_size": self.batch_size}
        problems = {task: self.problems[task] for task in self.scored_tasks if task in self.problems}
        if problems:
            settings["problems"] = problems
        return settings


def thawed(value):
    """The plain JSON value of a _frozen one (for a job's command line)."""
    if isinstance(value, MappingProxyType):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [thawed(item) for item in value]
    return value


@dataclass(frozen=True)
class CollapseRule:
    """The config's ``collapse`` section: when a run counts as collapsed (analysis.cells.curves)."""

    fraction: float
    """A run collapsed if after its peak its test score falls below fraction x peak and stays there."""
    confirm: int
    """Evaluations the final below-threshold stretch spans at least (one noisy last one is no collapse)."""

    @classmethod
    def build(cls, section: dict) -> "CollapseRule":
        return _section(cls, section)


@dataclass(frozen=True)
class GainArms:
    """A recipe's two arms in the config's ``gain_sources`` section (analysis.claims.gain_sources)."""

    without_mismatch: str
    """The recipe with a mismatch-free sampler (e.g. float32: pi/mu = 1 at lag 0)."""
    with_mismatch: str
    """The recipe with the sampler's numerics differing from the trainer's (e.g. bfloat16)."""


@dataclass(frozen=True)
class GainSources:
    """The config's ``gain_sources`` section: where each recipe's gain comes from (analysis.claims.gain_sources)."""

    baseline: GainArms
    recipes: MappingProxyType
    """recipe -> its GainArms, in the declared order."""
    smallest_effect: float

    @classmethod
    def build(cls, section: dict | None) -> "GainSources | None":
        if not section:
            return None
        return cls(GainArms(**section["baseline"]),
                   MappingProxyType({recipe: GainArms(**arms) for recipe, arms in section["recipes"].items()}),
                   float(section["smallest_effect"]))


@dataclass(frozen=True)
class SideBySide:
    """The config's ``side_by_side`` section: another grid whose claims this grid's report shows beside its own."""

    grid: str
    """The other grid's name (its folder <results_dir>/<grid>)."""
    label: str
    """What the other grid is, in the section's title (default: its name)."""

    @classmethod
    def build(cls, section: dict | None) -> "SideBySide | None":
        return None if section is None else cls(section["grid"], section.get("label", section["grid"]))


@dataclass(frozen=True)
class Config:
    """A checked workflow config (grid.config.validate), with its runs resolved."""

    raw: MappingProxyType
    """The checked config, defaults filled in, as <grid>/config.json holds it."""
    grid: str
    """The grid's name: outputs go to <results_dir>/<grid>/, MLflow experiment <grid>."""
    results_dir: Path
    """Where every grid's folder (and the MLflow store) lives."""
    grid_dir: Path
    """<results_dir>/<grid>."""
    engine: engines.Engine
    """The registered engine that trains every run (harness.engine)."""
    engine_params: MappingProxyType
    """The engine's settings, resolved by the engine (a preset expanded to its values); a recipe's
    runs may override some (recipe_engine_params: run_config(run)["engine_params"] is what they train with)."""
    recipes: tuple[str, ...]
    """Recipe names (stabilizers/recipes.yaml or extra_recipes): the rows of the table."""
    extra_recipes: MappingProxyType
    """The config's own recipes, name -> {loss, params, routing_replay, tis, rollout_is, veto}."""
    lags: tuple[int, ...]
    """Configured staleness values: the columns of the table."""
    lag_mode: str
    """How the lag is realized (harness.lag.LAG_MODES): interval, constant or bounded."""
    seeds: tuple[int, ...]
    """Seeds of every (recipe, lag) cell."""
    steps: int
    """Optimizer steps per run (the step budget)."""
    eval_every: int
    """A checkpoint is saved and evaluated every eval_every steps (and at the last)."""
    eval: Eval
    """How checkpoints are scored."""
    collapse: CollapseRule
    """When a run counts as collapsed."""
    baseline: str
    """The recipe (one of recipes) that probability of improvement is measured against."""
    resources: MappingProxyType
    """Per-rule job resources over the engine's defaults (grid.jobs.rule_resources)."""
    run_configs: MappingProxyType
    """Run -> its resolved run config (grid.expand.resolve_run_config)."""
    recipe_engine_params: MappingProxyType
    """Recipe (with a tuning section: each candidate) -> the engine's settings its runs train with."""
    grid_runs: tuple[Run, ...]
    """The grid's own runs (recipe x lag x seed, in config order): with a tuning section, not its candidates'."""
    claims: tuple[Claim, ...]
    """The declared claims, the confirmatory family (analysis.claims.verdicts answers them)."""
    seeding: Seeding | None
    """The seed schedule this grid runs (the declared looks its seeds allow); None: a fixed design."""
    seeding_declared: MappingProxyType | None
    """The ``seeding`` section as declared (before a narrowed seed list cuts its looks)."""
    tuning: Tuning | None
    """The equal tuning budget (grid.tuning); None without one."""
    gain_sources: GainSources | None
    """Where each recipe's gain comes from (analysis.claims.gain_sources); None without the section."""
    side_by_side: SideBySide | None
    """Another grid whose claims the report shows beside this one's; None without it."""
    lag_queue: MappingProxyType | None
    """The queueing model of lag mode queue (harness.queue_lag); None in the other modes."""
    canary: bool
    """Whether the engine's canary runs before the grid's train jobs (the config's canary, else the engine's default)."""
    # A new section: a class above, a field, a line in build.

    @classmethod
    def build(cls, config: dict) -> "Config":
        engine = engines.get(config["engine"])
        engine_params = engine.resolve_params(config["engine_params"])
        canary = engine.canary_by_default if config.get("canary") is None else config["canary"]
        if canary and engine.canary is None:
            raise ValueError(f"canary: true, but engine {engine.name!r} has no canary")
        # once: resolving a 1,000-run grid takes ms. Names and parameter names are checked without
        # importing torch; value ranges when jobs start (the Snakefile's onstart: check_recipe_values).
        # With a tuning section the runs are its candidates' (grid.tuning): the rows stay the recipes.
        tuning = Tuning.of(config)
        trainable = trainable_config(config, tuning, load_recipes(extra=config["extra_recipes"], check_values=False))
        recipes = load_recipes(extra=trainable["extra_recipes"], check_values=False)
        per_recipe = {recipe: engine.resolve_params(recipe_engine_params(trainable, recipe))
                      for recipe in trainable["recipes"]}
        run_configs = {run: resolve_run_config(trainable, *run, recipes=recipes, engine_params=per_recipe[run[0]])
                       for run in expand(trainable)}
        return cls(raw=MappingProxyType(config), grid=config["grid"], results_dir=Path(config["results_dir"]),
                   grid_dir=grid_dir(config), engine=engine, engine_params=MappingProxyType(engine_params),
                   recipes=tuple(config["recipes"]), extra_recipes=_frozen(config["extra_recipes"]),
                   lags=tuple(config["lags"]), lag_mode=config["lag_mode"], seeds=tuple(config["seeds"]),
                   steps=config["steps"], eval_every=config["eval_every"], eval=Eval.build(config["eval"]),
                   collapse=CollapseRule.build(config["collapse"]), baseline=config["baseline"],
                   resources=_frozen(config["resources"]), run_configs=MappingProxyType(run_configs),
                   recipe_engine_params=_frozen(per_recipe),
                   grid_runs=tuple(expand(config)), claims=claims(config), seeding=Seeding.of(config),
                   seeding_declared=_frozen(config.get("seeding")), tuning=tuning,
                   gain_sources=GainSources.build(config.get("gain_sources")),
                   side_by_side=SideBySide.build(config.get("side_by_side")),
                   lag_queue=_frozen(config.get("lag_queue")) if config["lag_mode"] == "queue" else None,
                   canary=canary)

    @property
    def folder(self) -> GridDir:
        """The grid's folder on disk; its runs are ``folder.run(recipe, lag, seed)``."""
        return GridDir(self.grid_dir)

    @property
    def beside_folder(self) -> GridDir | None:
        """The folder of the grid side_by_side names, under the same results_dir; None without it."""
        return None if self.side_by_side is None else GridDir(self.results_dir / self.side_by_side.grid)

    @property
    def reference_lag(self) -> int:
        """The lag every staleness cost is measured against: the grid's smallest."""
        return min(self.lags)

    @property
    def family(self) -> Family:
        """The claims as the claims room reads them (analysis.claims.verdicts): with the seed schedule, seeds
        and step budget."""
        return Family(self.claims, self.steps, self.seeding, tuple(self.seeds))

    def first_look(self) -> list[Run]:
        """The runs of the seed schedule's first look: every cell at seeds[:looks[0]]; without a schedule,
        every run. Later looks' runs come from the claims read at the look before (analysis.schedule.looks)."""
        if self.seeding is None:
            return list(self.grid_runs)
        seeds = set(self.seeds[:self.seeding.looks[0]])
        return [run for run in self.grid_runs if run[2] in seeds]

    def confirmation(self, picked: dict) -> "Config":
        """The grid of a tuning section's confirmation runs (grid.tuning.confirmation_config): each
        recipe replaced by its picked variant (``picked``: recipe -> value), a plain grid."""
        return Config.build(confirmation_config(thawed(self.raw), self.tuning, picked))

    @property
    def runs(self) -> list[Run]:
        return list(self.run_configs)

    def run_config(self, run: Run) -> dict:
        return self.run_configs[run]

    def prepare_params(self) -> dict:
        """What the engine's grid-wide prepare step reads of the resolved engine params."""
        return {key: self.engine_params[key] for key in self.engine.prepare_keys}

    def null_check_params(self) -> dict | None:
        """What the engine's lag-0 null check reads: the config's null_check settings and each
        distinct (engine params it reads, routing replay) of the grid's runs; None when the engine
        has no check or the config turns it off."""
        if self.engine.null_check is None or not self.raw["null_check"]["enabled"]:
            return None
        cases = {}
        for run_config in self.run_configs.values():
            # a key the engine leaves out at its default (tiny's version 1) is left out here too
            case = {"engine_params": {key: run_config["engine_params"][key] for key in self.engine.null_check_keys
                                      if key in run_config["engine_params"]},
                    "routing_replay": run_config["recipe"].get("routing_replay")}
            cases.setdefault(repr(sorted(case["engine_params"].items())) + repr(case["routing_replay"]), case)
        return {"settings": thawed(self.raw["null_check"]), "cases": list(cases.values())}
