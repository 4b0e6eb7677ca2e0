"""Load and check a workflow config before any job runs.

Two layers: the JSON schema (workflow/schemas/config.schema.yaml: types, ranges, required keys,
and every default, in that one place) and the checks a schema cannot express (recipe and
eval-task names exist, the baseline is in the grid, the fixed step is an evaluated step, the
engine's own parameter checks). Every error names the config key, e.g.
``config key 'lags[1]': -1 is less than the minimum of 0``. The allowed values that code defines
(engines, lag modes, eval back ends) are filled into the schema from that code, not repeated.
grid.settings turns the checked config into typed objects; grid.jobs holds the Snakemake
plumbing (CLI retyping, job resources, retries); grid.folder the grid folder (its config.json).
"""
from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import yaml

from grid.claims import claim_errors, seeding_errors
from grid.expand import recipe_engine_params
from grid.lines import nearest, with_lines
from grid.tuning import Tuning, trainable_config, tuning_errors
from harness import engine as engines
from harness.lag import LAG_MODES
from stabilizers import check_values, load_recipes

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
TASKS_DIR = ROOT / "eval" / "tasks"


class ConfigError(ValueError):
    """A workflow config that must not run; the message names every offending key."""


def key_path(path) -> str:
    """['lags', 1] -> 'lags[1]'; ['eval', 'k'] -> 'eval.k'."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _with_defaults(validator_class):
    """A validator that also fills schema defaults into the instance (jsonschema's documented recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def schema() -> dict:
    """The config schema, with the allowed values that code defines filled in: the engines of the
    registry, the lag modes, and the eval back ends (the engines' own, or null = the engine's)."""
    loaded = yaml.safe_load(SCHEMA.read_text())
    properties = loaded["properties"]
    properties["engine"]["enum"] = engines.available()
    properties["lag_mode"]["enum"] = list(LAG_MODES)
    backends = sorted({engines.get(name).eval_backend for name in engines.available()})
    properties["eval"]["properties"]["backend"]["enum"] = [*backends, None]
    return loaded


def _schema_errors(instance: dict, checked: dict, prefix: tuple = ()) -> list[str]:
    """Every violation of ``checked`` (a schema) by ``instance``, as 'config key ...' lines;
    fills in the schema's defaults. ``prefix``: the key path of ``instance`` in the config."""
    messages = []
    for error in sorted(_Validator(checked).iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
        path = [*prefix, *error.absolute_path]
        if error.validator == "required":
            missing = [name for name in error.validator_value if name not in error.instance]
            messages += [f"config key {key_path(path + [name])!r}: missing (required)" for name in missing]
            continue
        if error.validator == "additionalProperties":
            allowed = sorted(error.schema.get("properties", {}))
            for name in sorted(set(error.instance) - set(allowed)):
                messages.append(f"config key {key_path(path + [name])!r}: unknown key{nearest(name, allowed)}"
                                + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
            continue
        messages.append(f"config key {key_path(path) or '<root>'!r}: {error.message}")
    return messages


class _TaskYamlLoader(yaml.SafeLoader):
    """Safe YAML that tolerates lm-eval's `!function` tag (irrelevant to a task's name)."""


_TaskYamlLoader.add_constructor("!function", lambda loader, node: None)


def available_tasks(tasks_dir: str | Path = TASKS_DIR) -> set[str]:
    """Task names declared by the lm-eval task YAMLs under ``tasks_dir`` (their ``task:`` key).
    Read directly rather than through lm-eval's TaskManager: the same answer in milliseconds,
    and the workflow need not import lm-eval to start."""
    names = set()
    for path in sorted(Path(tasks_dir).glob("**/*.yaml")):
        spec = yaml.load(path.read_text(), Loader=_TaskYamlLoader)  # noqa: S506 - a SafeLoader subclass
        if isinstance(spec, dict) and isinstance(spec.get("task"), str):
            names.add(spec["task"])
    return names


def _semantic_errors(config: dict, tasks_dir: Path) -> list[str]:
    messages = []
    if config["eval_every"] > config["steps"]:
        messages.append(f"config key 'eval_every': {config['eval_every']} is more than steps={config['steps']}: "
                        "no checkpoint would ever be saved or evaluated")
    try:
        # names and parameter names only (no torch import); values: check_recipe_values
        recipes = load_recipes(extra=config.get("extra_recipes") or {}, check_values=False)
    except (KeyError, ValueError, FileNotFoundError) as error:
        return [f"config key 'extra_recipes': {error.args[0]}"]
    for i, name in enumerate(config["recipes"]):
        if name not in recipes:
            messages.append(f"config key 'recipes[{i}]': unknown recipe {name!r}{nearest(name, recipes)}; "
                            f"available: {', '.join(sorted(recipes))}")
    if config["baseline"] not in config["recipes"]:
        messages.append(f"config key 'baseline': {config['baseline']!r} is not one of the grid's recipes "
                        f"{config['recipes']}")
    tasks = available_tasks(tasks_dir)
    wanted = [(f"eval.tasks[{i}]", name) for i, name in enumerate(config["eval"]["tasks"])]
    if config["eval"].get("selection_task") is not None:
        wanted.append(("eval.selection_task", config["eval"]["selection_task"]))
    # A problem count for a task not scored is harmless (`-C eval=...` merges into config.yaml's),
    # one for no task at all is a typo that would silently score every problem.
    wanted += [(f"eval.problems.{name}", name) for name in config["eval"].get("problems") or {}]
    for key, name in wanted:
        if name not in tasks:
            messages.append(f"config key {key!r}: unknown eval task {name!r}{nearest(name, tasks)}; "
                            f"tasks in {tasks_dir}: {', '.join(sorted(tasks)) or 'none'}")
    try:
        engines.get(config["engine"]).resolve_params(config["engine_params"])
    except ValueError as error:
        messages.append(f"config key 'engine_params': {error}")
    messages += _recipe_engine_params_errors(config, recipes) + _gain_sources_errors(config, recipes)
    messages += _supplies_errors(config, recipes)
    fixed = config["eval"].get("fixed_step")
    if fixed is not None and (fixed > config["steps"] or (fixed % config["eval_every"] and fixed != config["steps"])):
        messages.append(f"config key 'eval.fixed_step': {fixed} is not an evaluated step "
                        f"(a multiple of eval_every={config['eval_every']} up to steps={config['steps']}, or steps)")
    side = config.get("side_by_side")
    if side is not None and side["grid"] == config["grid"]:
        messages.append(f"config key 'side_by_side.grid': {side['grid']!r} is this grid itself; name another grid "
                        f"under results_dir, whose claims this grid's table.md shows beside its own")
    return messages + claim_errors(config, recipes) + seeding_errors(config) + tuning_errors(config, recipes)


def _recipe_engine_params_errors(config: dict, known) -> list[str]:
    """A recipe's engine overrides name a known recipe, leave the grid-wide base model's knobs
    (the engine's prepare_keys) and the preset alone, and pass the engine's own checks. A known recipe
    outside the grid is allowed, so that a preset can be narrowed with -C recipes=[...]."""
    engine, messages = engines.get(config["engine"]), []
    for recipe, overrides in config["recipe_engine_params"].items():
        key = f"config key 'recipe_engine_params.{recipe}"
        if recipe not in known:
            messages.append(f"{key}': unknown recipe {recipe!r} (neither the registry's nor extra_recipes')")
            continue
        shared = sorted(set(overrides) & {"preset", *engine.prepare_keys})
        if shared:
            messages.append(f"{key}': {shared} are the whole grid's (its base model); set them in engine_params")
            continue
        try:
            engine.resolve_params(recipe_engine_params(config, recipe))
        except ValueError as error:
            messages.append(f"{key}': {error}")
    return messages


def _supplies_errors(config: dict, known) -> list[str]:
    """A grid recipe whose loss reads the sampler's distribution beyond the sampled token (Score
    Centering, ESTR) needs an engine that supplies it."""
    engine, messages = engines.get(config["engine"]), []
    for i, name in enumerate(config["recipes"]):
        if name in known:
            try:
                engines.check_supplies(engine, name, known[name].loss)
            except ValueError as error:
                messages.append(f"config key 'recipes[{i}]': {error}")
    return messages


def _gain_sources_errors(config: dict, known) -> list[str]:
    """gain_sources names known recipes (a preset narrowed on the command line may leave some out of the
    grid: those are not tested) and reads lag 0."""
    section = config.get("gain_sources")
    if not section:
        return []
    messages = [] if 0 in config["lags"] else [f"config key 'gain_sources': reads lag 0 (no staleness), which "
                                               f"lags {config['lags']} does not have"]
    arms = [("baseline", section["baseline"])] + [(f"recipes.{name}", arm) for name, arm in section["recipes"].items()]
    for where, arm in arms:
        for side, recipe in arm.items():
            if recipe not in known:
                messages.append(f"config key 'gain_sources.{where}.{side}': unknown recipe {recipe!r}")
    return messages


def validate(config: dict, *, tasks_dir: str | Path = TASKS_DIR) -> dict:
    """A checked copy of ``config`` with the schema's defaults filled in; raises ConfigError
    listing every problem, each naming its key."""
    config = copy.deepcopy(dict(config))
    messages = _schema_errors(config, schema())
    if not messages:  # the semantic checks assume the shapes the schema guarantees
        messages = _semantic_errors(config, Path(tasks_dir))
    if messages:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(messages))
    return config


def check_eval_settings(settings: dict) -> dict:
    """One evaluate job's settings (grid.settings.Eval.job_settings) checked against the schema's
    eval section, its defaults filled in; raises ConfigError naming each 'eval.<key>'."""
    if not isinstance(settings, dict):
        raise ConfigError(f"eval settings must be a JSON object, got {type(settings).__name__}")
    section = {**schema()["properties"]["eval"], "required": []}  # a job is given its settings, not the task list
    settings = copy.deepcopy(settings)
    messages = _schema_errors(settings, section, prefix=("eval",))
    if messages:
        raise ConfigError("invalid eval settings:\n  " + "\n  ".join(messages))
    return settings


def check_recipe_values(config: dict) -> None:
    """The value ranges of the grid's recipes (eps, alpha, a TIS cap...), which validate leaves out
    because they run the loss code and so import torch: the workflow calls this when jobs are about
    to start, so that a dry run plans without torch. Raises ConfigError naming the recipe."""
    # with a tuning section, the rows the grid trains are its candidates (grid.tuning)
    config = trainable_config(config, Tuning.of(config), load_recipes(extra=config.get("extra_recipes") or {}, check_values=False))
    recipes = load_recipes(extra=config.get("extra_recipes") or {}, check_values=False)
    try:
        check_values({name: recipes[name] for name in config["recipes"]}, "config 'recipes'")
    except ValueError as error:
        raise ConfigError(f"invalid workflow config:\n  {error}") from None


def _syntax_error(path: Path, error: yaml.MarkedYAMLError) -> str:
    """A YAML syntax error as a person reads it: the file, the line and column (1-based) of the problem,
    where the construct it interrupts began, and a tab's remedy."""
    mark = error.problem_mark
    text = f"config file {path}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {error.problem}"
    if error.context and error.context_mark is not None:
        text += f" ({error.context} opened at line {error.context_mark.line + 1}, column {error.context_mark.column + 1})"
    if "'\\t'" in (error.problem or ""):
        text += "; YAML indents and separates with spaces: replace the tab by spaces"
    return text


def read_file(path: str | Path) -> dict:
    """A config file's mapping, unchecked; a missing file, a YAML syntax error (its line and column) or
    another top level raises ConfigError naming the file. The Snakefile reads config.yaml through this
    before Snakemake does (whose own message names neither the file nor the line)."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.MarkedYAMLError as error:
        raise ConfigError(_syntax_error(path, error)) from None
    if not isinstance(config, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    return config


def load(path: str | Path, overrides: dict | None = None, **kwargs) -> dict:
    """Read a YAML config (read_file), apply top-level ``overrides``, validate (see ``validate``); each error
    ends with the file's line that set its key (grid.lines)."""
    try:
        return validate({**read_file(path), **(overrides or {})}, **kwargs)
    except ConfigError as error:
        raise ConfigError(with_lines(str(error), [Path(path)], set(overrides or {}))) from None


def main(argv: list[str] | None = None) -> int:
    """``python -m grid.config FILE...``: each workflow config file read and checked, as the workflow
    would before any job (``make demo CONFIG=FILE`` runs this first: Snakemake reads a --configfile
    before any project code and names neither its line nor its column)."""
    import sys
    status = 0
    for path in argv if argv is not None else sys.argv[1:]:
        try:
            load(path)
        except ConfigError as error:
            print(f"grid.config: {error}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())
