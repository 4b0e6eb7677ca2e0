"""Recipes: a named loss + params + engine switches, the rows of a grid (Table 1's names and controls).

Reading recipes checks names, parameter names and the value ranges the modules declare (eps,
alpha, a TIS cap...: stabilizers._ranges) without importing torch (stabilizers._catalog), so a
dry run refuses them. Then the recipe is run once on a one-token batch, which needs torch and
catches what a declaration cannot say (a bound the code derives): ``check_values=False`` leaves
that to a later check_values() call (the workflow does it when jobs are about to start).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import _catalog as catalog
from ._ranges import check_values as check_ranges
from ._ranges import complete
from .api import LossOutput, PolicyBatch, SamplerDistribution, check_params, get, loss_needs, parameters

DEFAULT_RECIPES = Path(__file__).with_name("recipes.yaml")
_RECIPE_KEYS = {"loss", "params", "routing_replay", "tis", "rollout_is", "veto", "std_normalization", "table1"}
# the weights and masks a recipe switches on: key -> (module, function); their keyword parameters are the keys
_SWITCHES = {"tis": ("tis", "tis_weight"), "rollout_is": ("rollout_is", "rollout_is_weight"),
             "veto": ("veto", "veto_mask")}


@dataclass(frozen=True)
class Recipe:
    name: str
    loss: str
    params: dict = field(default_factory=dict)
    routing_replay: bool | str = False  # true = R3 (the engine's routing), "r2" (the trainer's recompute's)
    tis: dict | None = None  # {"cap": C, "floor": F or absent}; None = no TIS
    table1: str | None = None  # the method column of Table 1 this recipe reproduces
    rollout_is: dict | None = None  # sequence/token TIS and masked IS (stabilizers.rollout_is); None = off
    # the engine divides each group's advantages by the group's reward std (GRPO); false = Dr.GRPO's
    # advantages, the reward minus the group mean only (arXiv 2503.20783)
    std_normalization: bool = True
    veto: dict | None = None  # mu-GRPO's negative-advantage veto (stabilizers.veto); None = off

    def compute_loss(self, batch: PolicyBatch, *, step_seed: int | None = None) -> LossOutput:
        """The recipe's loss on ``batch``: the veto's mask, TIS weight, then the rollout-correction
        weight (if any; they multiply), then the stabilizer.
        A stabilizer with a ``seed`` parameter gets ``step_seed`` so its draws differ per step."""
        metrics = {}
        if self.veto is not None:
            from .veto import with_veto
            batch, metrics = with_veto(batch, **self.veto)
        if self.tis is not None:
            from .tis import with_tis
            batch, tis_metrics = with_tis(batch, **self.tis)
            metrics.update(tis_metrics)
        if self.rollout_is is not None:
            from .rollout_is import with_rollout_is
            batch, is_metrics = with_rollout_is(batch, **self.rollout_is)
            metrics.update(is_metrics)
        params = dict(self.params)
        if step_seed is not None and "seed" in parameters(self.loss):
            params["seed"] = step_seed
        out = get(self.loss)(batch, **params)
        out.metrics.update(metrics)
        return out

    @property
    def replay(self) -> str | None:
        """The MoE routing the update replays: "r3" (the rollout engine's), "r2" (the trainer's own
        old-logp recompute's) or None."""
        return {False: None, True: "r3", "r2": "r2"}[self.routing_replay]

    def as_dict(self) -> dict:
        spec = {"loss": self.loss, "params": dict(self.params), "routing_replay": self.routing_replay,
                "tis": None if self.tis is None else dict(self.tis), "table1": self.table1}
        if self.rollout_is is not None:  # absent when off, so that the run keys of older recipes stay the same
            spec["rollout_is"] = dict(self.rollout_is)
        if self.veto is not None:  # likewise
            spec["veto"] = dict(self.veto)
        if not self.std_normalization:  # absent when on, for the same reason
            spec["std_normalization"] = False
        return spec


def recipe_from_named_dict(spec: dict, source: str) -> Recipe:
    """The inverse of ``{"name": recipe.name, **recipe.as_dict()}`` (how run configs carry a recipe)."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"{source}: a recipe must be a mapping with a 'name', got {spec!r}")
    return recipe_from_dict(spec["name"], {key: value for key, value in spec.items() if key != "name"}, source)


def recipe_from_dict(name: str, spec: dict, source: str = "<dict>", *, check_values: bool = True) -> Recipe:
    """Build and check one recipe; errors name the recipe and where it was defined."""
    where = f"recipe {name!r} ({source})"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(spec).__name__}")
    unknown = set(spec) - _RECIPE_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed {sorted(_RECIPE_KEYS)}")
    if "loss" not in spec:
        raise ValueError(f"{where}: missing 'loss'")
    tis, rollout_is, veto = (_checked_switch(key, spec.get(key), where) for key in ("tis", "rollout_is", "veto"))
    # "r3" is spelled true in the recipes (and run keys) that predate R2, so it is stored as true
    routing_replay = spec.get("routing_replay", False)
    routing_replay = True if routing_replay == "r3" else routing_replay
    if routing_replay not in (False, True, "r2") or not isinstance(routing_replay, (bool, str)):
        raise ValueError(f"{where}: routing_replay must be false, true (= r3), r3 or r2, got {spec['routing_replay']!r}")
    std_normalization = spec.get("std_normalization", True)
    if not isinstance(std_normalization, bool):
        raise ValueError(f"{where}: std_normalization must be true or false, got {std_normalization!r}")
    if not isinstance(spec.get("params") or {}, dict):
        raise ValueError(f"{where}: params must be a mapping, got {spec['params']!r}")
    try:
        check_params(spec["loss"], spec.get("params") or {})
    except (KeyError, ValueError) as error:
        raise ValueError(f"{where}: {error.args[0]}") from None
    recipe = Recipe(name=name, loss=spec["loss"], params=dict(spec.get("params") or {}),
                    routing_replay=routing_replay, tis=tis, table1=spec.get("table1"), rollout_is=rollout_is,
                    std_normalization=std_normalization, veto=veto)
    if check_values:
        _check_values(recipe, where)
    return recipe


def switch_defaults(key: str) -> dict[str, object]:
    """The keyword defaults of a recipe switch's weight or mask ("tis", "rollout_is" or "veto"), from source (no torch)."""
    return catalog.function_signature(*_SWITCHES[key])[0]


def _checked_switch(key: str, values: dict | None, where: str) -> dict | None:
    """A copy of the recipe's ``tis``, ``rollout_is`` or ``veto`` mapping, its keys and declared value ranges
    checked (no torch); None when off."""
    if values is None:
        return None
    defaults, declared = catalog.function_signature(*_SWITCHES[key])
    if not isinstance(values, dict) or set(values) - set(defaults):
        raise ValueError(f"{where}: {key} must be null or a mapping with keys {sorted(defaults)}, got {values!r}")
    try:
        check_ranges(complete(declared, defaults, key), defaults, values, prefix=f"{key} ")
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return dict(values)


def _check_values(recipe: Recipe, where: str) -> None:
    """Run the recipe once on a one-token batch, so that a value its code refuses beyond the declared
    ranges (a bound it derives) fails when the recipe is read, naming it, not at the first step."""
    import torch

    zero, one = torch.zeros(1, 1), torch.ones(1, 1)
    # a one-entry vocabulary (mu = pi = 1, entropy 0) for a loss that reads the sampler's distribution
    sampler = SamplerDistribution(logq=zero[..., None], logp=zero[..., None], entropy=zero) if loss_needs(recipe.loss) else None
    try:
        recipe.compute_loss(PolicyBatch(logp=zero, old_logp=zero, rollout_logp=zero, advantages=one, mask=one,
                                        sampler=sampler))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None


def check_values(recipes: dict[str, Recipe], source: str = "<dict>") -> None:
    """The value checks that ``check_values=False`` skipped, for every recipe of ``recipes``."""
    for recipe in recipes.values():
        _check_values(recipe, f"recipe {recipe.name!r} ({source})")


def load_recipes(path: str | Path = DEFAULT_RECIPES, extra: dict | None = None, *,
                 check_values: bool = True) -> dict[str, Recipe]:
    """The recipes of a YAML file, plus ``extra`` ones (a config's own recipes, which may not
    redefine a name from the file)."""
    path = Path(path)
    try:
        specs = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise FileNotFoundError(f"recipe file not found: {path}") from None
    if not isinstance(specs, dict):
        raise ValueError(f"{path}: expected a mapping of recipe name -> recipe, got {type(specs).__name__}")
    recipes = {name: recipe_from_dict(name, spec, str(path), check_values=check_values)
               for name, spec in specs.items()}
    for name, spec in (extra or {}).items():
        if name in recipes:
            raise ValueError(f"recipe {name!r} is defined in {path} and again in the config")
        recipes[name] = recipe_from_dict(name, spec, "config", check_values=check_values)
    return recipes


def get_recipe(name: str, recipes: dict[str, Recipe] | None = None) -> Recipe:
    recipes = load_recipes() if recipes is None else recipes
    if name not in recipes:
        raise KeyError(f"unknown recipe {name!r}; available: {', '.join(sorted(recipes))}")
    return recipes[name]
