"""A local stand-in for the parts of THUDM/slime that engines.slime calls (slime is not installable here).

It mirrors slime's calling conventions at the commit pinned in envs/slime-container.yaml, written
from reading that source (not copied):
- ``get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths,
  with_entropy=False, non_loss_data=True)`` -> (empty tensor, {"log_probs": [...], "entropy": [...]}),
  logits [1, T, V] float32 of the packed samples, the log-prob of token p read from position p - 1;
- ``compute_approx_kl(log_probs, log_probs_base, kl_loss_type, importance_ratio=None)``;
- ``slime_loss_function``: what slime's ``loss_function`` + Megatron do with a custom loss: build
  ``sum_of_sample_mean`` (or the per-token sum), call the function, rescale the loss, and the
  gradient normalisation of one step (per-token: / step tokens; else / step samples).
- ``log(args, metrics, step_key)``: slime.observability.logging_utils.log, recording its calls;
- ``load_function(path)``: how slime resolves every ``--*-path`` hook (slime/utils/misc.py), and
  ``HOOK_CALLS``: the arguments slime calls each hook of the launcher with;
- ``install()`` puts these under their slime module names in sys.modules.
"""
from __future__ import annotations

import importlib
import sys
import types
from argparse import Namespace

import torch


def get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths,
                              with_entropy=False, non_loss_data=True, top_p_token_ids=None,
                              top_p_token_offsets=None):
    assert non_loss_data
    assert logits.dtype == torch.float32 and logits.dim() == 3 and logits.size(0) == 1
    logits = logits.squeeze(0)
    temperature = getattr(args, "rollout_temperature", 1.0)
    if temperature != 1.0:
        logits = logits / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    tokens = torch.cat(list(unconcat_tokens))
    log_probs, entropies, offset = [], [], 0
    for total, response in zip(total_lengths, response_lengths):
        end = offset + total
        start = end - response
        rows = log_softmax[start - 1:end - 1]
        log_probs.append(rows.gather(-1, tokens[start:end].unsqueeze(-1)).squeeze(-1))
        entropies.append(-(rows.exp() * rows).sum(-1))
        offset += total
    result = {"log_probs": log_probs}
    if with_entropy:
        result["entropy"] = entropies
    return torch.empty((0,)), result


def compute_approx_kl(log_probs, log_probs_base, kl_loss_type, importance_ratio=None):
    log_ratio = log_probs.float() - log_probs_base.float()
    if kl_loss_type == "k1":
        kl = log_ratio
    elif kl_loss_type in ("k3", "low_var_kl"):
        kl = (-log_ratio).exp() - 1 + log_ratio
    else:
        raise ValueError(kl_loss_type)
    if importance_ratio is not None:
        kl = importance_ratio * kl
    if kl_loss_type == "low_var_kl":
        kl = kl.clamp(min=-10, max=10)
    return kl


def sum_of_sample_mean_factory(response_lengths, loss_masks, per_token: bool):
    """slime's reducer at context-parallel size 1: per-sample masked mean summed over samples,
    or (per-token loss) the masked sum."""
    def sum_of_sample_mean(x):
        return sum((x_i * m).sum() / torch.clamp_min(m.sum(), 1)
                   for x_i, m in zip(x.split(response_lengths, dim=0), loss_masks))

    def sum_of_token(x):
        return sum((x_i * m).sum() for x_i, m in zip(x.split(response_lengths, dim=0), loss_masks))

    return sum_of_token if per_token else sum_of_sample_mean


def slime_loss_function(args, batch, logits, func):
    """One micro-batch, one rank, one step: the loss whose gradient slime applies, and the metrics
    as slime logs them (sum over micro-batches / step normaliser)."""
    per_token = args.calculate_per_token_loss
    reducer = sum_of_sample_mean_factory(batch["response_lengths"], batch["loss_masks"], per_token)
    loss, metrics = func(args, batch, logits, reducer)
    for key, value in metrics.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0, f"metric {key} is not a scalar tensor"
    num_tokens = sum(torch.clamp_min(m.sum(), 1) for m in batch["loss_masks"])
    step_samples = len(batch["loss_masks"])
    # loss_function's rescale, then Megatron's / num_microbatches (1 here) and the finalize step
    normaliser = num_tokens if per_token else step_samples
    logged = {key: value / normaliser for key, value in metrics.items()}
    return loss / normaliser, logged


def slime_args(**overrides) -> Namespace:
    """The attributes of slime's parsed args that the adapter reads, with slime's defaults
    (slime/utils/arguments.py at the pinned commit), including the options that change what a loss
    receives (the store_false ones, --disable-*, default to True)."""
    values = dict(calculate_per_token_loss=False, use_rollout_routing_replay=False, use_tis=False,
                  rollout_top_p=1.0, rollout_temperature=1.0, entropy_coef=0.0, use_kl_loss=False,
                  kl_loss_coef=0.0, kl_loss_type="k1", seed=1234,
                  use_rollout_logprobs=False, use_unbiased_kl=False, keep_old_actor=False, use_routing_replay=False,
                  partial_rollout=False, normalize_advantages=False, grpo_std_normalization=True,
                  rewards_normalization=True, custom_reward_post_process_path=None,
                  custom_advantage_function_path=None, compute_advantages_and_returns=True, use_opd=False,
                  ref_update_interval=None)
    values.update(overrides)
    return Namespace(**values)


def load_function(path: str):
    """slime's hook resolution: the last dotted part is an attribute of the module named by the rest."""
    module_path, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module_path), attribute)


# slime's call of each hook flag's function, by argument name (slime/backends/megatron_utils/loss.py
# loss_function, actor.py train_actor, observability/rollout_metrics.py log_rollout_data)
HOOK_CALLS = {
    "--custom-loss-function-path": ("args", "batch", "logits", "sum_of_sample_mean"),
    "--rollout-data-postprocess-path": ("args", "rollout_id", "rollout_data"),
    "--custom-rollout-log-function-path": ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time"),
}


LOGGED: list[tuple[dict, str]] = []  # what slime.observability.logging_utils.log received


def log(args, metrics, step_key):
    """slime.observability.logging_utils.log (wandb / tensorboard in slime): recorded here."""
    LOGGED.append((dict(metrics), step_key))


def install() -> None:
    """Register the stand-in under slime's module names (idempotent)."""
    logging_module = types.ModuleType("slime.observability.logging_utils")
    logging_module.log = log
    loss_module = types.ModuleType("slime.backends.megatron_utils.loss")
    loss_module.get_log_probs_and_entropy = get_log_probs_and_entropy
    ppo_module = types.ModuleType("slime.utils.ppo_utils")
    ppo_module.compute_approx_kl = compute_approx_kl
    modules = {"slime": types.ModuleType("slime"), "slime.backends": types.ModuleType("slime.backends"),
               "slime.backends.megatron_utils": types.ModuleType("slime.backends.megatron_utils"),
               "slime.backends.megatron_utils.loss": loss_module,
               "slime.utils": types.ModuleType("slime.utils"), "slime.utils.ppo_utils": ppo_module,
               "slime.observability": types.ModuleType("slime.observability"),
               "slime.observability.logging_utils": logging_module}
    for name, module in modules.items():
        sys.modules.setdefault(name, module)
    sys.modules["slime.observability"].logging_utils = sys.modules["slime.observability.logging_utils"]
