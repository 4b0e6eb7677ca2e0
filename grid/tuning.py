"""The config's equal tuning budget, typed: the ``tuning`` section (analysis.schedule.tune picks the values;
docs/statistics.md, "Equal tuning budget").

Every tuned recipe gets the same number of candidate values of one of its parameters. Each candidate
is a recipe variant with a name, run folders and run keys of its own (``<recipe>.<param>-<value>``,
e.g. ``sat_grpo.alpha-0.95``), so that every run the workflow may train is known before any job
runs: the tuning runs (every variant x selection lag x tuning seed) and the confirmation runs (a
variant x the grid's lags x the grid's seeds), among which the grid-wide pick (a Snakemake
checkpoint, analysis.schedule.tune) chooses the picked variant's. The claims name the recipes; the
confirmation grid (:func:`confirmation_config`) is the plain grid of the picked variants, so that
aggregation and tracking read it as any other grid. Self-contained (defaults live in the schema);
grid.config calls :func:`tuning_errors` among its semantic checks.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from grid.lines import nearest
from stabilizers import Recipe, load_recipes, parameters, recipe_from_dict, switch_defaults

SWITCHES = ("tis", "rollout_is", "veto")  # a recipe's weights and masks: "veto.threshold" tunes the veto's
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # the rule files' recipe wildcard
CLAIM_RECIPE_FIELDS = ("recipe", "versus", "other_recipe", "other_versus")


@dataclass(frozen=True)
class Candidates:
    """One recipe's candidates: the parameter(s) set to each value, in the declared order (ties go to
    the earlier one: list the source's default first)."""

    recipe: str
    params: tuple[str, ...]  # each a loss parameter ("alpha") or a switch's ("veto.threshold"), set alike
    values: tuple

    def variant(self, value) -> str:
        """The candidate's recipe name, e.g. sat_grpo.alpha-0.95 or grpo.eps_low_eps_high-0.1."""
        label = "_".join(param.replace(".", "_") for param in self.params)
        return f"{self.recipe}.{label}-{_value_text(value)}"

    @property
    def variants(self) -> list[str]:
        return [self.variant(value) for value in self.values]


def _value_text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Tuning:
    """The config's ``tuning`` section, over the recipes this grid runs."""

    seeds: tuple[int, ...]
    """The tuning seeds: disjoint from the grid's seeds (the confirmation's)."""
    metric: str
    """The per-run score the candidates are ranked by (auc or fixed; analysis.cells.curves)."""
    lags: tuple[int, ...]
    """The lags the tuning runs train at; a candidate's score is its mean over these lags and the seeds."""
    candidates: dict
    """recipe -> Candidates, in the grid's recipe order."""

    @classmethod
    def of(cls, config: dict) -> "Tuning | None":
        section = config.get("tuning")
        if section is None:
            return None
        candidates = {recipe: Candidates(recipe, _params(section["recipes"][recipe]),
                                         tuple(section["recipes"][recipe]["values"]))
                      for recipe in config["recipes"] if recipe in section["recipes"]}
        return cls(tuple(section["seeds"]), section["metric"], tuple(section["lags"] or config["lags"]), candidates)

    def runs(self) -> list[tuple[str, int, int]]:
        """Every tuning run: each variant at each selection lag and tuning seed."""
        return [(variant, lag, seed) for candidates in self.candidates.values() for variant in candidates.variants
                for lag in self.lags for seed in self.seeds]


def _params(entry: dict) -> tuple[str, ...]:
    return (entry["param"],) if isinstance(entry["param"], str) else tuple(entry["param"])


def variant_spec(recipe: Recipe, params: tuple[str, ...], value) -> dict:
    """The recipe's spec (as extra_recipes holds one) with ``params`` set to ``value``. Without the
    published row it reproduces: a tuned value is not the paper's setting."""
    spec = copy.deepcopy(recipe.as_dict())
    spec.pop("table1", None)
    for param in params:
        switch, _, key = param.rpartition(".")
        (spec[switch] if switch else spec["params"])[key] = value
    return spec


def variant_specs(tuning: Tuning, recipes: dict) -> dict[str, dict]:
    """Every candidate variant of the grid's tuned recipes: name -> spec."""
    return {candidates.variant(value): variant_spec(recipes[recipe], candidates.params, value)
            for recipe, candidates in tuning.candidates.items() for value in candidates.values}


def trainable_config(config: dict, tuning: Tuning | None, recipes: dict) -> dict:
    """A plain grid (no tuning section) whose runs are every run a tuning config may train: each
    variant at every lag and at the tuning and the grid's seeds (grid.settings resolves their run
    configs once); ``config`` itself when it declares no tuning (``tuning``: its section, Tuning.of)."""
    if tuning is None:
        return config
    variants = {recipe: c.variants for recipe, c in tuning.candidates.items()}
    # every lag: the tuning's lags are the grid's (grid.config), the confirmation's are all of them
    return {**_renamed(config, tuning, variants, recipes), "seeds": [*tuning.seeds, *config["seeds"]], "claims": []}


def confirmation_config(config: dict, tuning: Tuning, picked: dict) -> dict:
    """The grid of the confirmation runs: each recipe replaced by its picked variant (``picked``:
    recipe -> value) in the rows, the baseline, the claims and recipe_engine_params; the grid's seeds."""
    recipes = load_recipes(extra=config.get("extra_recipes") or {}, check_values=False)
    variants = {recipe: [c.variant(picked[recipe])] for recipe, c in tuning.candidates.items()}
    view = _renamed(config, tuning, variants, recipes)
    view["claims"] = [{**claim, **{field: variants[claim[field]][0] for field in CLAIM_RECIPE_FIELDS
                                   if claim.get(field) in variants}} for claim in config.get("claims") or []]
    return view


def _renamed(config: dict, tuning: Tuning, variants: dict, recipes: dict) -> dict:
    """``config`` with each recipe's row replaced by its ``variants`` (defined in extra_recipes)."""
    specs = {name: spec for name, spec in variant_specs(tuning, recipes).items()
             if any(name in names for names in variants.values())}
    engine = config.get("recipe_engine_params") or {}
    return {**copy.deepcopy(config), "tuning": None,
            "recipes": [name for recipe in config["recipes"] for name in variants[recipe]],
            "extra_recipes": {**(config.get("extra_recipes") or {}), **specs},
            "baseline": variants[config["baseline"]][0],
            "recipe_engine_params": {name: overrides for recipe, overrides in engine.items()
                                     for name in variants.get(recipe, [])}}


def tuning_errors(config: dict, recipes: dict) -> list[str]:
    """An unequal budget (a recipe with more or fewer candidates than another, or a grid recipe with
    none), tuning seeds that are also confirmation seeds, a parameter the recipe has not, repeated
    values or selection lags outside the grid. A seed schedule (config ``seeding``) is the confirmation's: the
    picked values' grid runs it look by look, as any grid."""
    section = config.get("tuning")
    if section is None:
        return []
    messages = []
    confirmation = set(config["seeds"])
    messages += [f"config key 'tuning.seeds[{i}]': seed {seed} is also a confirmation seed (config key 'seeds'); "
                 "the picked values are confirmed on seeds the tuning never used"
                 for i, seed in enumerate(section["seeds"]) if seed in confirmation]
    messages += [f"config key 'tuning.lags[{i}]': {lag} is not one of the grid's lags {config['lags']}"
                 for i, lag in enumerate(section["lags"] or []) if lag not in config["lags"]]
    messages += [f"config key 'tuning.recipes': the grid's recipe {recipe!r} has no candidates; with a tuning "
                 "section every recipe of the grid is tuned (an untuned recipe beside tuned ones is no equal budget)"
                 for recipe in config["recipes"] if recipe not in section["recipes"]]
    counts = {recipe: len(entry["values"]) for recipe, entry in section["recipes"].items()}
    first = next(iter(counts), None)
    messages += [f"config key 'tuning.recipes.{recipe}.values': {count} candidates, but "
                 f"'tuning.recipes.{first}.values' has {counts[first]}: an equal budget gives every recipe "
                 "the same number" for recipe, count in counts.items() if count != counts[first]]
    for recipe, entry in section["recipes"].items():
        messages += _candidate_errors(recipe, entry, recipes)
    return messages


def _candidate_errors(recipe: str, entry: dict, recipes: dict) -> list[str]:
    key = f"config key 'tuning.recipes.{recipe}"
    if recipe not in recipes:
        return [f"{key}': unknown recipe {recipe!r}{nearest(recipe, recipes)}; available: {', '.join(sorted(recipes))}"]
    base, params = recipes[recipe], _params(entry)
    messages = []
    for param in params:
        switch, _, name = param.rpartition(".")
        if switch and switch not in SWITCHES:
            messages.append(f"{key}.param': {param!r}: {switch!r} is not one of the switches {list(SWITCHES)}")
        elif switch and getattr(base, switch) is None:
            messages.append(f"{key}.param': {param!r}: recipe {recipe!r} has no {switch} to tune")
        elif name not in (switch_defaults(switch) if switch else parameters(base.loss)):
            messages.append(f"{key}.param': {recipe!r} ({base.loss}) has no parameter {param!r}")
    if messages:
        return messages
    values = entry["values"]
    messages += [f"{key}.values[{j}]': {value!r} is listed twice" for j, value in enumerate(values)
                 if value in values[:j]]
    candidates = Candidates(recipe, params, tuple(values))
    for j, value in enumerate(values):
        name = candidates.variant(value)
        if not _NAME.fullmatch(name) or name in recipes:
            messages.append(f"{key}.values[{j}]': {value!r} makes the recipe name {name!r}, which "
                            + ("is taken" if name in recipes else "a run folder cannot be named"))
            continue
        try:
            recipe_from_dict(name, variant_spec(base, params, value), "config 'tuning'", check_values=False)
        except ValueError as error:
            messages.append(f"{key}.values[{j}]': {error}")
    return messages
