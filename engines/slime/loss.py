"""slime's custom-loss entry point: the recipe's stabilizer inside slime's Megatron trainer.

    --loss-type custom_loss --custom-loss-function-path engines.slime.loss.policy_loss
    --custom-config-path <the run's engine settings YAML>     (written by engines.slime.job_script)

slime calls ``policy_loss(args, batch, logits, sum_of_sample_mean)`` once per micro-batch
(slime/backends/megatron_utils/loss.py, ``loss_function``). ``batch`` holds per-sample lists:
``log_probs`` (the trainer's recompute at the start of the step = old_logp), ``rollout_log_probs``
(log mu, recorded by SGLang), ``advantages``, ``loss_masks`` (one tensor per response token),
``unconcat_tokens``, ``response_lengths``, ``total_lengths`` and, with a KL loss, ``ref_log_probs``.
The current log-probs come from slime's ``get_log_probs_and_entropy`` on ``logits`` [1, T, V].
The lists are padded into a [B, L] ``PolicyBatch`` and the recipe of the run (``args.stalebench_recipe``,
a key of the custom-config YAML) computes the loss: TIS weight first when the recipe asks
(stabilizers.with_tis, w = min(exp(old_logp - log mu), cap)), then the stabilizer.

Normalisation (why the returned loss is a *sum*). slime rescales what a loss function returns
and Megatron averages it over micro-batches and data-parallel ranks so that the step's
gradient is  sum over micro-batches and ranks of grad(loss_mb) / N,  with N the step's token
count under ``--calculate-per-token-loss`` and the step's sample count otherwise. The stabilizer
returns a mean, -sum(S) / D, over its own denominator D (active tokens for ``token_mean``,
responses for ``sample_mean``; with the global quantile scope D is the all-ranks count divided
by the world size, stabilizers._surrogate.aggregate). Returning loss x D = -sum(S) makes the
step's gradient exactly the stabilizer's mean over the whole step: token_mean needs
``--calculate-per-token-loss`` (the launcher sets it), sample_mean needs it off. Both are checked
here. slime's token count counts a response without active tokens as 1; the stabilizer does not,
so the two agree whenever every response has an active token (slime zeroes whole responses
only for removed samples, which the harness never requests).

Metrics are returned the same way slime's own are: each micro-batch mean times slime's
normaliser of that micro-batch, so that slime's reduction (sum over micro-batches and ranks,
divided by the step total) logs the step's weighted mean as train/<key>.

slime and megatron are imported inside the functions: this module imports on any machine.

Host syncs: the tensor part (recipe_loss) traces whole with torch.compile(fullgraph=True); the
recipe is parsed once per custom config, not per micro-batch; the batch is validated only with
STALEBENCH_VALIDATE_BATCH=1 (a debug switch: the finiteness check reads values on the host).
"""
from __future__ import annotations

import itertools
import json
import os

import torch
from torch.nn.utils.rnn import pad_sequence

from harness.engine import merge_metrics
from harness.io import write_json_atomic
from harness.run import RunDir
from stabilizers import (
    PolicyBatch,
    Recipe,
    fingerprint,
    offpolicy_diagnostics,
    parameters,
    recipe_from_named_dict,
    validate_batch,
)

RECIPE_KEY = "stalebench_recipe"  # the custom-config key holding the run's recipe (name + recipe dict)
_AGGREGATIONS = {"token_mean": True, "sample_mean": False}  # -> value of args.calculate_per_token_loss
_calls = itertools.count()  # micro-batch counter: a distinct seed per call for stabilizers that draw
_RECIPES: dict[str, Recipe] = {}  # parsed recipes by their custom-config text
VALIDATE = os.environ.get("STALEBENCH_VALIDATE_BATCH") == "1"

# slime options (at the pinned commit) that change what the custom loss receives or computes and that
# the adapter does not handle: (flag, attribute on slime's args, slime's default, what it changes).
# Refused by name in engine_params.extra_args (engines.slime.params.resolve_params, so `snakemake -n`
# already says so) and again on the trainer's parsed args (check_args).
UNHANDLED_SLIME_OPTIONS = (
    ("--use-rollout-logprobs", "use_rollout_logprobs", False,
     "slime then passes SGLang's log mu as the old log-probs and never recomputes them: the ratio is 1, "
     "clipping does nothing and the step's |d| statistics are not written"),
    ("--use-unbiased-kl", "use_unbiased_kl", False,
     "slime's unbiased KL weights the KL term by an importance ratio; only slime's built-in policy loss "
     "reads it (a no-op under the custom loss, refused so that the run's flags say what it trains)"),
    ("--keep-old-actor", "keep_old_actor", False,
     "the old log-probs come from a kept copy of the previous actor, not from the policy at the step's start"),
    ("--partial-rollout", "partial_rollout", False,
     "a response then holds tokens of several policy versions, so log mu and the realized lag mix versions"),
    ("--normalize-advantages", "normalize_advantages", False,
     "the advantages are whitened over the data-parallel group"),
    ("--disable-rewards-normalization", "rewards_normalization", True,
     "the rewards are no longer normalised within their group"),
    ("--custom-reward-post-process-path", "custom_reward_post_process_path", None,
     "a custom function replaces slime's group normalisation of the rewards"),
    ("--custom-advantage-function-path", "custom_advantage_function_path", None,
     "a custom function replaces the advantages"),
    ("--disable-compute-advantages-and-returns", "compute_advantages_and_returns", True,
     "no advantages are computed"),
    ("--use-opd", "use_opd", False, "on-policy distillation subtracts a teacher's KL from the advantages"),
    ("--ref-update-interval", "ref_update_interval", None,
     "the KL reference is replaced by the actor during the run"),
)

# slime / Megatron options that change which samples are trained or how the optimiser steps: refused by
# name in engine_params.extra_args (resolve_params), since a run key could not tell such a run apart.
DATA_AND_OPTIMISATION_FLAGS = {
    "--custom-convert-samples-to-train-data-path": "a custom function replaces slime's conversion of the samples "
                                                   "to training data, and with it the reward normalisation",
    "--dynamic-sampling-filter-path": "DAPO's dynamic sampling drops prompt groups and over-samples: the trained "
                                      "prompts and the batch differ from the recipe's",
    "--over-sampling-batch-size": "the granularity of dynamic sampling's over-sampling",
    "--rollout-sample-filter-path": "a custom filter removes samples from the loss",
    "--rollout-all-samples-process-path": "a custom function processes every sample, filtered ones included",
    "--buffer-filter-path": "a custom function selects the samples taken from the buffer",
    "--reset-optimizer-states": "Adam's state is cleared after every rollout",
    "--use-stateless-adam": "Adam without optimiser state",
    "--moe-z-loss-coeff": "a router z-loss is added to the objective",
}

# slime options a recipe switches (the launcher sets them from the recipe): refused in extra_args, so
# that a run's recipe, and with it its run key, says what the run trains.
RECIPE_SWITCHED_FLAGS = {"--disable-grpo-std-normalization": "std_normalization: false"}


def recipe_of(args) -> Recipe:
    """The run's recipe from ``args.stalebench_recipe`` (a dict with its name), checked."""
    spec = getattr(args, RECIPE_KEY, None)
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"args.{RECIPE_KEY} is missing or has no 'name': pass the custom-config YAML written by "
                         "engines.slime.job_script with --custom-config-path")
    text = json.dumps(spec, sort_keys=True)
    if text not in _RECIPES:
        recipe = recipe_from_named_dict(spec, "--custom-config-path")
        check_trainer_fingerprint(args, recipe)
        _RECIPES[text] = recipe
    return _RECIPES[text]


def check_trainer_fingerprint(args, recipe: Recipe) -> None:
    """The recipe's fingerprint (stabilizers.fingerprint) as this process computes it, i.e. on the
    training actor where Megatron calls the loss, with the container's code and torch, against
    the run's fingerprint, which engines.train recorded on the job's node before slime started (and
    which aggregate checks): a trainer that would compute another loss stops at its first micro-batch.
    The trainer's own is written beside it (RunDir.engine_file("trainer_fingerprint"))."""
    run_dir = getattr(args, "stalebench_run_dir", None)
    if run_dir is None:
        raise ValueError("args.stalebench_run_dir is missing: pass the custom-config YAML written by "
                         "engines.slime.job_script with --custom-config-path")
    run = RunDir(run_dir)
    ran = fingerprint(recipe)
    recorded = run.read_fingerprint()
    if recorded is None or recorded["digest"] != ran["digest"]:
        raise ValueError(f"recipe {recipe.name!r} on the training actor has fingerprint {ran['digest']}, but "
                         f"{run.fingerprint_path} holds {recorded and recorded['digest']}: the trainer's stabilizer "
                         "code or numerics are not the launcher's")
    write_json_atomic(run.engine_file("trainer_fingerprint"), ran)


def aggregation_of(recipe: Recipe) -> str:
    """How the recipe's stabilizer averages (its ``aggregation`` parameter); slime can express only
    the two aggregations it has a normaliser for."""
    defaults = parameters(recipe.loss)
    if "aggregation" not in defaults:
        raise ValueError(f"recipe {recipe.name!r}: stabilizer {recipe.loss!r} has no 'aggregation' parameter, "
                         "so engines.slime cannot map its loss to slime's normalisation")
    aggregation = recipe.params.get("aggregation", defaults["aggregation"])
    if aggregation not in _AGGREGATIONS:
        raise ValueError(f"recipe {recipe.name!r}: aggregation {aggregation!r} has no slime normalisation; "
                         f"use one of {sorted(_AGGREGATIONS)}")
    return aggregation


def per_token_loss_flag(recipe: Recipe) -> bool:
    """Whether the run needs slime's ``--calculate-per-token-loss``."""
    return _AGGREGATIONS[aggregation_of(recipe)]


def refuse_unhandled_flags(extra_args: list) -> None:
    """Raise, naming the flag, when extra_args sets one of UNHANDLED_SLIME_OPTIONS, DATA_AND_OPTIMISATION_FLAGS
    or RECIPE_SWITCHED_FLAGS."""
    given = {str(arg).split("=", 1)[0] for arg in extra_args}
    for flag, _, _, effect in UNHANDLED_SLIME_OPTIONS:
        if flag in given:
            raise ValueError(f"engine_params.extra_args sets {flag}: {effect}; engines.slime does not handle it, "
                             "so the run would not train the recipe's loss")
    for flag, effect in DATA_AND_OPTIMISATION_FLAGS.items():
        if flag in given:
            raise ValueError(f"engine_params.extra_args sets {flag}: {effect}; engines.slime refuses it, so that "
                             "every run of a grid trains the same data with the same optimiser")
    for flag, switch in RECIPE_SWITCHED_FLAGS.items():
        if flag in given:
            raise ValueError(f"engine_params.extra_args sets {flag}: the recipe switches it ({switch}), "
                             "so that the recipe and its run key say what the run trains")


def refuse_unhandled_options(args) -> None:
    """Raise, naming the flag, when slime's parsed args differ from slime's default on one of
    UNHANDLED_SLIME_OPTIONS (an attribute slime does not have counts as its default)."""
    for flag, attribute, default, effect in UNHANDLED_SLIME_OPTIONS:
        if getattr(args, attribute, default) != default:
            raise ValueError(f"slime runs with {flag} ({attribute} = {getattr(args, attribute)!r}): {effect}; "
                             "engines.slime does not handle it")


def check_routing_replay(args, recipe: Recipe) -> None:
    """R3 replays SGLang's routing (--use-rollout-routing-replay), R2 the recompute's (--use-routing-replay
    alone). slime_validate_args sets use_routing_replay whenever use_rollout_routing_replay is given
    (slime/utils/arguments.py 2010-2011 at the pin), so R3 accepts it; R2 is use_routing_replay without
    the rollout's routing; no replay is neither."""
    rollout = bool(getattr(args, "use_rollout_routing_replay", False))
    recompute = bool(getattr(args, "use_routing_replay", False))
    valid = {"r3": rollout, "r2": recompute and not rollout, None: not rollout and not recompute}
    if not valid[recipe.replay]:
        raise ValueError(f"recipe {recipe.name!r} has routing_replay={recipe.routing_replay} but slime runs with "
                         f"use_rollout_routing_replay={rollout}, use_routing_replay={recompute}")


def check_args(args, recipe: Recipe) -> None:
    """The slime flags the recipe relies on; a mismatch means the job was not launched by engines.slime."""
    refuse_unhandled_options(args)
    want = per_token_loss_flag(recipe)
    if bool(getattr(args, "calculate_per_token_loss", False)) != want:
        raise ValueError(f"recipe {recipe.name!r} aggregates with {aggregation_of(recipe)!r}: slime must run "
                         f"{'with' if want else 'without'} --calculate-per-token-loss")
    check_routing_replay(args, recipe)
    # Dr.GRPO's advantages: slime's group normalisation without the std division
    if bool(getattr(args, "grpo_std_normalization", True)) != recipe.std_normalization:
        raise ValueError(f"recipe {recipe.name!r} has std_normalization={recipe.std_normalization} but slime runs "
                         f"with grpo_std_normalization={getattr(args, 'grpo_std_normalization', True)}")
    if getattr(args, "use_tis", False):
        raise ValueError("--use-tis is slime's TIS for its built-in loss; the recipe applies TIS itself "
                         "(recipe 'tis'), so launch without --use-tis")
    if getattr(args, "rollout_top_p", 1.0) != 1.0:
        raise ValueError(f"rollout_top_p = {args.rollout_top_p}: engines.slime supports top_p = 1 only "
                         "(the paper's setting; slime's top-p log-prob replay is not wired)")


def to_policy_batch(log_probs: list[torch.Tensor], old_log_probs: list[torch.Tensor],
                    rollout_log_probs: list[torch.Tensor], advantages: list[torch.Tensor],
                    loss_masks: list[torch.Tensor], reduce=None) -> PolicyBatch:
    """Per-sample response tensors -> a [B, L] PolicyBatch (zero-padded, mask 0 on padding).
    ``log_probs`` keeps its gradient; the others are detached."""
    lengths = [len(t) for t in log_probs]
    for name, tensors in (("old log_probs", old_log_probs), ("rollout_log_probs", rollout_log_probs),
                          ("advantages", advantages), ("loss_masks", loss_masks)):
        if [len(t) for t in tensors] != lengths:
            raise ValueError(f"slime batch: {name} lengths {[len(t) for t in tensors]} differ from the "
                             f"response lengths of the current log-probs {lengths}")

    def pad(tensors, dtype, detach=True):
        return pad_sequence([(t.detach() if detach else t).to(dtype) for t in tensors], batch_first=True)

    dtype = log_probs[0].dtype
    return PolicyBatch(logp=pad(log_probs, dtype, detach=False), old_logp=pad(old_log_probs, dtype),
                       rollout_logp=pad(rollout_log_probs, dtype), advantages=pad(advantages, dtype),
                       mask=pad(loss_masks, dtype), reduce=reduce)


def quantile_reduce(recipe: Recipe):
    """Collectives for SAT's global quantile scope: all-gather over Megatron's data-parallel group
    (every rank's micro-batch of the same step); None for the paper's micro-batch scope."""
    if recipe.params.get("quantile_scope", "microbatch") != "global":
        return None
    from megatron.core import parallel_state

    from stabilizers import TorchDistributedReduce
    return TorchDistributedReduce(group=parallel_state.get_data_parallel_group(with_context_parallel=True))


def stabilizer_denominator(batch: PolicyBatch, aggregation: str) -> torch.Tensor:
    """D with stabilizer loss = -sum(S) / D (stabilizers._surrogate.aggregate): active tokens or
    responses with tokens, and across ranks the global count over the number of ranks."""
    active = batch.mask.bool()
    count = active.sum() if aggregation == "token_mean" else (active.sum(-1) > 0).sum()
    count = count.to(torch.float64)
    if batch.reduce is None:
        return count.clamp(min=1)
    counts = batch.reduce.all_gather(count.reshape(1))
    return torch.cat(counts).sum().clamp(min=1) / len(counts)


def slime_normaliser(loss_masks: list[torch.Tensor], per_token: bool) -> torch.Tensor:
    """What slime divides this micro-batch's metrics by: its token count (a response without active
    tokens counts 1, as in slime's loss_function) or its number of samples."""
    if per_token:
        return sum(torch.clamp_min(mask.sum(), 1) for mask in loss_masks).to(torch.float64)
    return torch.tensor(float(len(loss_masks)), dtype=torch.float64)


def policy_loss(args, batch: dict, logits: torch.Tensor, sum_of_sample_mean) -> tuple[torch.Tensor, dict]:
    """slime custom loss: (args, batch, logits, sum_of_sample_mean) -> (loss, {name: 0-d tensor})."""
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

    recipe = recipe_of(args)
    check_args(args, recipe)
    _, current = get_log_probs_and_entropy(
        logits, args=args, unconcat_tokens=batch["unconcat_tokens"], total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"], with_entropy=True)
    return recipe_loss(args, batch, current["log_probs"], current["entropy"], sum_of_sample_mean, recipe)


def recipe_loss(args, batch: dict, log_probs: list[torch.Tensor], entropy: list[torch.Tensor],
                sum_of_sample_mean, recipe: Recipe) -> tuple[torch.Tensor, dict]:
    """The loss and metrics of ``policy_loss`` once the current log-probs are known."""
    if not batch.get("rollout_log_probs"):
        raise ValueError("slime batch has no rollout_log_probs: SGLang's log mu is needed by every recipe "
                         "(the d statistics, TIS, SAT, DPPO)")
    # slime's own rule: without a recompute (e.g. one micro-batch reuse) old_logp is the current policy
    old = batch.get("log_probs") or [lp.detach() for lp in log_probs]
    policy_batch = to_policy_batch(log_probs, old, batch["rollout_log_probs"], batch["advantages"],
                                   batch["loss_masks"], reduce=quantile_reduce(recipe))
    if VALIDATE:
        validate_batch(policy_batch)
    aggregation = aggregation_of(recipe)
    seed = int(getattr(args, "seed", 0)) * 1_000_003 + next(_calls)
    out = recipe.compute_loss(policy_batch, step_seed=seed)
    pg_loss = out.loss * stabilizer_denominator(policy_batch, aggregation).to(out.loss.dtype)

    flat_log_probs = torch.cat(log_probs)
    entropy_sum = sum_of_sample_mean(torch.cat(entropy))
    entropy_coef = getattr(args, "entropy_coef", 0.0)
    loss = pg_loss - entropy_coef * entropy_sum if entropy_coef else pg_loss
    metrics = {"pg_loss": pg_loss.detach().clone(), "entropy_loss": entropy_sum.detach().clone()}
    if getattr(args, "use_kl_loss", False):
        from slime.utils.ppo_utils import compute_approx_kl
        kl = compute_approx_kl(flat_log_probs, torch.cat(batch["ref_log_probs"]), kl_loss_type=args.kl_loss_type)
        kl_loss = sum_of_sample_mean(kl)
        loss = loss + args.kl_loss_coef * kl_loss
        metrics["kl_loss"] = kl_loss.detach().clone()
    if flat_log_probs.numel() == 0:  # keep every rank in the backward pass (slime does the same)
        loss = loss + 0 * flat_log_probs.sum()
    metrics["loss"] = loss.detach().clone()

    # the off-policy diagnostics of every recipe (stabilizers._diagnostics), per micro-batch: slime's
    # reduction logs their normaliser-weighted mean over the step's micro-batches
    loss_metrics = {**out.metrics, **offpolicy_diagnostics(policy_batch.old_logp, policy_batch.rollout_logp,
                                                           policy_batch.mask)}
    normaliser = slime_normaliser(batch["loss_masks"], per_token_loss_flag(recipe))
    return loss, merge_metrics(metrics, {key: (value.detach().to(torch.float64) * normaliser).to(loss.dtype).reshape(())
                                         for key, value in loss_metrics.items()})
