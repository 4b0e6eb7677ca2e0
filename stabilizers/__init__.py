"""stabilizers: policy-loss rules for asynchronous RL, one module each, looked up by name.

    from stabilizers import PolicyBatch, get, load_recipes
    out = get("sat_grpo")(batch, alpha=0.9)        # -> LossOutput(loss, metrics)
    out = load_recipes()["sat_gspo_r3"].compute_loss(batch)

Imports nothing from engines/, eval/ or workflow/. Importing the package does not import torch
(recipe and parameter checks read the modules' source); the losses import it when first looked up.
"""
from .api import LossOutput, PolicyBatch, Reduce, available, get, parameters, register, validate_batch
from .recipes import Recipe, check_values, get_recipe, load_recipes, recipe_from_dict, recipe_from_named_dict

__all__ = ["LossOutput", "PolicyBatch", "Recipe", "Reduce", "available", "check_values", "get", "get_recipe",
           "load_recipes", "parameters", "recipe_from_dict", "recipe_from_named_dict", "register", "tis_weight", "validate_batch", "with_tis"]


def __getattr__(name: str):
    """tis_weight and with_tis, imported on first use (their module imports torch)."""
    if name in ("tis_weight", "with_tis"):
        from . import tis
        return getattr(tis, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
