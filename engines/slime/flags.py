"""Every slime / Megatron flag of a run (``slime_flags``), the entry point that takes them, and the
flags the launcher owns (engine_params.extra_args may not set them: engines.slime.preflight)."""
from __future__ import annotations

from engines.slime import loss as slime_loss
from engines.slime.params import model_context, model_shape
from harness.run import RunDir
from harness.run_config import RunConfig

# Flags the launcher owns although it emits them only in some runs, or never (they would bypass a
# check or change what the harness measures); the flags it emits for the run are owned too.
OWNED_FLAGS = frozenset({
    "--apply-chat-template", "--no-save-optim", "--sequence-parallel", "--calculate-per-token-loss",
    "--use-rollout-routing-replay", "--use-routing-replay", "--fp16", "--bf16", "--use-kl-loss", "--kl-loss-coef",
    "--kl-loss-type", "--reward-key",
    "--update-weights-interval", "--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d",
    "--use-precision-aware-optimizer", "--colocate", "--use-tis", "--custom-rm-path", "--eval-interval",
    "--rollout-max-prompt-len", "--save-hf",
})


def slime_flags(run_config: RunConfig, run: RunDir, *, extra: bool = True) -> list[tuple[str, ...]]:
    """Every slime / Megatron flag of the run (a checked RunConfig: its recipe and resolved
    engine_params), one tuple per flag (flag, *values), extra_args last unless ``extra`` is False;
    MODEL_ARGS come from the model's script in the container."""
    recipe, params = run_config.recipe, run_config.engine_params
    context = model_context(params, model_shape(params["model_type"]))
    megatron = str(run.engine_file("resume_checkpoints"))
    eps_low, eps_high = recipe.params.get("eps_low", 0.2), recipe.params.get("eps_high", 0.2)
    flags = [
        # model, checkpoints, resume
        ("--hf-checkpoint", params["hf_checkpoint"]), ("--ref-load", params["ref_load"]),
        ("--load", megatron), ("--save", megatron), ("--save-interval", str(run_config.eval_every)),
        ("--save-hf", str(run.engine_file("hf_saves") / "iter_{rollout_id}")),
        *([] if params["save_optimizer"] else [("--no-save-optim",)]),
        ("--seed", str(run_config.seed)), ("--rollout-seed", str(run_config.seed)),
        # data and rollout
        ("--prompt-data", params["prompt_data"]), ("--input-key", params["input_key"]),
        ("--label-key", params["label_key"]), *([("--apply-chat-template",)] if params["apply_chat_template"] else []),
        ("--rollout-shuffle",), ("--rm-type", params["rm_type"]),
        *([("--reward-key", params["reward_key"])] if params["reward_key"] else []),
        ("--num-rollout", str(run_config.steps)),
        ("--rollout-batch-size", str(params["rollout_batch_size"])),
        ("--n-samples-per-prompt", str(params["n_samples_per_prompt"])),
        ("--global-batch-size", str(params["global_batch_size"])),
        ("--rollout-max-response-len", str(params["rollout_max_response_len"])),
        ("--rollout-temperature", str(params["rollout_temperature"])),
        ("--rollout-top-p", str(params["rollout_top_p"])), ("--rollout-top-k", str(params["rollout_top_k"])),
        # slime asks SGLang for max_new_tokens whatever the prompt's length: longer prompts are dropped
        ("--rollout-max-context-len", str(context)),
        ("--rollout-max-prompt-len", str(context - params["rollout_max_response_len"])),
        # resources and parallelism (asynchronous: trainer and SGLang on separate GPUs)
        ("--num-gpus-per-node", str(params["gpus_per_node"])),
        ("--actor-num-nodes", "1"), ("--actor-num-gpus-per-node", str(params["actor_gpus"])),
        ("--rollout-num-gpus", str(params["rollout_gpus"])),
        ("--rollout-num-gpus-per-engine", str(params["rollout_gpus_per_engine"])),
        ("--sglang-mem-fraction-static", str(params["sglang_mem_fraction"])),
        ("--tensor-model-parallel-size", str(params["tensor_parallel"])),
        *([("--sequence-parallel",)] if params["sequence_parallel"] else []),
        ("--pipeline-model-parallel-size", str(params["pipeline_parallel"])),
        ("--context-parallel-size", str(params["context_parallel"])),
        ("--expert-model-parallel-size", str(params["expert_parallel"])),
        ("--expert-tensor-parallel-size", str(params["expert_tensor_parallel"])),
        ("--use-dynamic-batch-size",), ("--max-tokens-per-gpu", str(params["max_tokens_per_gpu"])),
        ("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1"),
        # optimisation
        ("--optimizer", "adam"), ("--lr", str(params["lr"])), ("--lr-decay-style", "constant"),
        ("--weight-decay", str(params["weight_decay"])), ("--adam-beta1", str(params["adam_beta1"])),
        ("--adam-beta2", str(params["adam_beta2"])), ("--clip-grad", str(params["clip_grad"])),
        # the policy loss: the recipe's stabilizer (TIS inside it), slime's group-normalised advantages
        ("--advantage-estimator", "grpo"), ("--loss-type", "custom_loss"),
        *([("--disable-grpo-std-normalization",)] if not recipe.std_normalization else []),  # Dr.GRPO
        ("--custom-loss-function-path", "engines.slime.loss.policy_loss"),
        *([("--calculate-per-token-loss",)] if slime_loss.per_token_loss_flag(recipe) else []),
        # slime's built-in clip, unused by the custom loss: set to the recipe's for the record
        ("--eps-clip", str(eps_low)), ("--eps-clip-high", str(eps_high)),
        *([("--use-rollout-routing-replay",)] if recipe.replay == "r3" else []),  # R3: SGLang's routing
        *([("--use-routing-replay",)] if recipe.replay == "r2" else []),  # R2: the trainer's recompute's routing
        *([("--use-kl-loss",), ("--kl-loss-coef", str(params["kl_loss_coef"])),
           ("--kl-loss-type", params["kl_loss_type"])] if params["kl_loss_coef"] else []),
        ("--kl-coef", "0.0"), ("--entropy-coef", str(params["entropy_coef"])),
        # the harness's hooks
        ("--custom-config-path", str(run.engine_file("engine_settings"))),
        ("--rollout-data-postprocess-path", "engines.slime.metrics.postprocess"),
        ("--custom-rollout-log-function-path", "engines.slime.metrics.log_rollout"),
        # numerics (slime's recommended settings for Qwen3 MoE)
        ("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0"),
        ("--accumulate-allreduce-grads-in-fp32",), ("--attention-softmax-in-fp32",),
        ("--attention-backend", "flash"),
        # a non-finite loss or gradient is a result, not a crash: Megatron's check (on by default) raises
        # before the step is logged, and every retry would raise again; without it slime skips that
        # update and logs the non-finite grad norm, and the driver ends the run there (diverged)
        ("--no-check-for-nan-in-loss-and-grad",),
        *([("--fp16",)] if params["precision"] == "fp16" else []),  # FP16 training + rollouts, arXiv 2510.26788
    ]
    if params["optimizer_cpu_offload"]:  # as slime's own Qwen3-30B-A3B script
        flags += [("--optimizer-cpu-offload",), ("--overlap-cpu-optimizer-d2h-h2d",), ("--use-precision-aware-optimizer",)]
    if extra and params["extra_args"]:
        flags.append(tuple(str(arg) for arg in params["extra_args"]))
    return flags


# every lag mode runs the harness's driver, which pushes the weights itself (no --update-weights-interval)
ENTRYPOINT = ("python3", "-m", "engines.slime.driver")


