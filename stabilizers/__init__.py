"""stabilizers: policy-loss rules for asynchronous RL, one module each, looked up by name.

    from stabilizers import PolicyBatch, get, load_recipes
    out = get("sat_grpo")(batch, alpha=0.9)        # -> LossOutput(loss, metrics)
    out = load_recipes()["sat_gspo_r3"].compute_loss(batch)

Imports nothing from engines/, eval/ or workflow/. Importing the package does not import torch
(recipe and parameter checks read the modules' source); the losses import it when first looked up.
"""
import importlib

from .api import (
    SAMPLER_NEEDS,
    LossOutput,
    PolicyBatch,
    Reduce,
    SamplerDistribution,
    available,
    get,
    loss_needs,
    parameters,
    register,
    validate_batch,
)
from .recipes import (
    Recipe,
    check_values,
    get_recipe,
    load_recipes,
    recipe_from_dict,
    recipe_from_named_dict,
    switch_defaults,
)

# the names below are imported on first use: their modules import torch
_TORCH_EXPORTS = {"tis_weight": "tis", "with_tis": "tis", "offpolicy_diagnostics": "_diagnostics",
                  "ess_lr_scale": "_diagnostics", "TorchDistributedReduce": "_distributed",
                  "fingerprint": "_fingerprint"}

__all__ = ["SAMPLER_NEEDS", "LossOutput", "PolicyBatch", "Recipe", "Reduce", "SamplerDistribution", "available",
           "check_values", "get", "get_recipe", "load_recipes", "loss_needs", "parameters", "recipe_from_dict", "recipe_from_named_dict", "register",
           "switch_defaults", "validate_batch", *_TORCH_EXPORTS]


def __getattr__(name: str):
    if name in _TORCH_EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_TORCH_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
