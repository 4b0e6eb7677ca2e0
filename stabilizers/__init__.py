"""stabilizers: policy-loss rules for asynchronous RL, one module each, looked up by name.

    from stabilizers import PolicyBatch, get, load_recipes
    out = get("sat_grpo")(batch, alpha=0.9)        # -> LossOutput(loss, metrics)
    out = load_recipes()["sat_gspo_r3"].compute_loss(batch)

Imports nothing from engines/, eval/ or workflow/.
"""
from .api import LossOutput, PolicyBatch, Reduce, available, get, parameters, register, validate_batch
from .recipes import Recipe, get_recipe, load_recipes, recipe_from_dict, recipe_from_named_dict
from .tis import tis_weight, with_tis

__all__ = ["LossOutput", "PolicyBatch", "Reduce", "Recipe", "available", "get", "get_recipe", "load_recipes",
           "parameters", "recipe_from_dict", "recipe_from_named_dict", "register", "tis_weight", "validate_batch", "with_tis"]
