"""Checks that must pass before a slime job spends its first GPU-hour.

Run by the dry run (engines.slime.job_script writes their report into the job script) and by every job
before it starts Ray (``python3 -m engines.slime.preflight --run-dir DIR``, with slime's own reward
functions). Each check raises ValueError naming the engine_params key:

- reward: slime's reward ``rm_type`` must score the prompt format of the data. It is run on the
  shipped sample responses of that format (engines/slime/reward_samples.jsonl): every correct
  answer must score above every wrong one. (slime's ``deepscaler`` scores 0 unless the response
  holds ``</think>`` or ``###Response``, which a base model without a chat template never writes.)
  With the data on disk, every prompt must carry the format's instruction and, for ``dapo``, every
  label must be an integer (slime's DAPO scorer converts it with int(float(label))).
- memory: parameters, gradients, Adam states and one micro-batch's activations per training GPU
  (estimate_memory) must fit in ``gpu_memory_gib``; the estimate is printed.
- context: a response of ``rollout_max_response_len`` tokens must leave room for a prompt in the
  model's context.
- host memory: the job's memory (SLURM_MEM_PER_NODE, the train rule's mem_mb) must hold CPU Adam, the
  weight backups and R3's routed experts at a mid-run response length (engines.slime.footprint).
- disk: the run's peak on disk (HF saves kept for evaluation, Megatron saves kept) must fit in its file
  system's free space or Lustre quota.
- extra_args: no flag the launcher sets (argparse keeps the last value, so an override would silently
  change the run), none the model script's MODEL_ARGS set (they come last: models.yaml script_flags)
  and no flag slime, Megatron or SGLang does not define (slime ignores unknown flags):
  engines/slime/known_flags.txt, refreshed by engines/slime/refresh_known_flags.py.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

from engines.slime.flags import OWNED_FLAGS, slime_flags
from engines.slime.footprint import check_disk, check_host_memory, check_spill
from engines.slime.params import PROMPT_FORMATS, model_context, model_shape, parameter_counts
from engines.slime.reward_model import rule_reward
from harness.io import read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig

HERE = Path(__file__).resolve().parent
REWARD_SAMPLES = HERE / "reward_samples.jsonl"
KNOWN_FLAGS = HERE / "known_flags.txt"
GIB = 1024 ** 3

# What each of slime's rule-based rewards needs in a response to give it a positive score.
REWARD_NEEDS = {
    "dapo": "a line 'Answer: <integer>' in the last 300 characters; the result is a dict (reward_key: score)",
    "deepscaler": "'</think>' or '###Response' before a \\boxed{...} answer, else 0",
    "math": "a \\boxed{...} answer",
}

# --- reward --------------------------------------------------------------------------------------

def slime_reward(rm_type: str) -> Callable[[str, str], float | dict]:
    """slime's own reward dispatch (inside the job's container)."""
    from slime.rollout.rm_hub import async_rm
    from slime.utils.types import Sample

    args = Namespace(rm_type=rm_type, custom_rm_path=None)
    return lambda response, label: asyncio.run(async_rm(args, Sample(prompt="", response=response, label=label)))


def check_reward(params: dict, reward: Callable[[str, str], float | dict]) -> str:
    """Correct sample answers of the prompt format must score above wrong ones."""
    fmt, rm_type, key = params["prompt_format"], params["rm_type"], params["reward_key"]
    samples = [row for row in read_jsonl(REWARD_SAMPLES) if row["format"] == fmt]
    scores = {True: [], False: []}
    for row in samples:
        value = reward(row["response"], row["label"])
        if isinstance(value, dict):
            if key not in value:
                raise ValueError(f"engine_params.rm_type = {rm_type!r} returns {sorted(value)}: set engine_params."
                                 f"reward_key to the score's key (got {key!r})")
            value = value[key]
        scores[row["correct"]].append(float(value))
    if min(scores[True]) <= max(scores[False]):
        raise ValueError(
            f"engine_params.rm_type = {rm_type!r} cannot score prompt_format {fmt!r} ({PROMPT_FORMATS[fmt][0]}): "
            f"on the sample responses of {REWARD_SAMPLES.name} correct answers score {scores[True]} and wrong ones "
            f"{scores[False]}, so every reward would carry no signal. {rm_type!r} needs "
            f"{REWARD_NEEDS.get(rm_type, 'its own format')}.")
    return (f"reward: {rm_type} scores prompt_format {fmt}: correct samples {min(scores[True])}, "
            f"wrong ones <= {max(scores[False])}")


def check_prompts(params: dict) -> str:
    """Every prompt carries its format's instruction; DAPO labels are integers."""
    fmt, path = params["prompt_format"], Path(params["prompt_data"])
    if fmt == "think" and not params["apply_chat_template"]:
        raise ValueError("engine_params.prompt_format = 'think' needs apply_chat_template: true (the chat template "
                         "makes the model write </think>)")
    marker = PROMPT_FORMATS[fmt][1]
    rows = read_jsonl(path)
    for line, row in enumerate(rows, 1):
        prompt, label = row.get(params["input_key"]), row.get(params["label_key"])
        if prompt is None or label is None:
            raise ValueError(f"{path} line {line}: no {params['input_key']!r} or {params['label_key']!r} "
                             "(engine_params.input_key / label_key)")
        if marker and marker not in (prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)):
            raise ValueError(f"{path} line {line}: the prompt does not ask for {marker!r}, but engine_params."
                             f"prompt_format = {fmt!r} ({PROMPT_FORMATS[fmt][0]})")
        if params["rm_type"] == "dapo" and not re.fullmatch(r"\s*-?\d+(\.0*)?\s*", str(label)):
            raise ValueError(f"{path} line {line}: label {label!r} is not an integer, which slime's dapo reward needs")
    return f"prompts: {len(rows)} rows of {path} in prompt_format {fmt}"


# --- memory and context --------------------------------------------------------------------------

def estimate_memory(params: dict, shape: dict) -> dict:
    """GiB per training GPU under Megatron with slime's settings.

    Static state: bf16 parameters (2 B), fp32 gradient buffers (4 B, --accumulate-allreduce-grads-
    in-fp32) and the distributed optimizer's fp32 master weights + Adam moments (12 B, sharded over
    the data-parallel ranks; slime always enables --use-distributed-optimizer), none of it with
    optimizer_cpu_offload. Non-expert weights shard over TP x PP, experts over EP x ETP x PP.
    Activations of one micro-batch of max_tokens_per_gpu tokens T under the launcher's full uniform
    recomputation: each layer's bf16 input (2 h bytes per token), one layer recomputed at a time
    (34 h bytes per token: Korthikanti et al. 2022, sequence parallel, flash attention), all over TP,
    plus the fp32 logits and their gradient (2 x 4 V bytes per token over TP). The CUDA context,
    NCCL buffers and fragmentation come on top."""
    world, tp, pp = params["actor_gpus"], params["tensor_parallel"], params["pipeline_parallel"]
    ep = params["expert_parallel"] * params["expert_tensor_parallel"]
    dense, experts = parameter_counts(shape)
    per_gpu = {"dense": dense / (tp * pp), "expert": experts / (ep * pp)}
    data_parallel = {"dense": world // (tp * pp), "expert": world // (ep * pp)}
    optimizer = 0.0 if params["optimizer_cpu_offload"] else sum(12 * per_gpu[k] / data_parallel[k] for k in per_gpu)
    tokens = params["max_tokens_per_gpu"]
    activations = (shape["num_layers"] // pp * tokens * shape["hidden_size"] * 2 + tokens * shape["hidden_size"] * 34
                   + 2 * 4 * tokens * shape["vocab_size"]) / tp
    out = {"parameters": 2 * sum(per_gpu.values()) / GIB, "gradients": 4 * sum(per_gpu.values()) / GIB,
           "optimizer": optimizer / GIB, "activations": activations / GIB,
           "parameters_per_gpu": sum(per_gpu.values()), "total_parameters": dense + experts}
    out["total"] = out["parameters"] + out["gradients"] + out["optimizer"] + out["activations"]
    return out


def check_memory(params: dict, shape: dict) -> str:
    world, pp = params["actor_gpus"], params["pipeline_parallel"]
    ep = params["expert_parallel"] * params["expert_tensor_parallel"]
    if world % (ep * pp) or (shape["num_experts"] and shape["num_experts"] % params["expert_parallel"]):
        raise ValueError(f"engine_params.actor_gpus = {world} must be a multiple of expert_parallel x "
                         f"expert_tensor_parallel x pipeline_parallel = {ep * pp}, and num_experts = "
                         f"{shape['num_experts']} a multiple of expert_parallel")
    memory = estimate_memory(params, shape)
    line = (f"memory per training GPU (estimate, {memory['parameters_per_gpu'] / 1e9:.2f}B of "
            f"{memory['total_parameters'] / 1e9:.2f}B parameters): {memory['parameters']:.1f} GiB bf16 weights + "
            f"{memory['gradients']:.1f} GiB fp32 gradients + {memory['optimizer']:.1f} GiB Adam states"
            f"{' (offloaded to CPU)' if params['optimizer_cpu_offload'] else ''} + {memory['activations']:.1f} GiB "
            f"activations of {params['max_tokens_per_gpu']} tokens = {memory['total']:.1f} GiB of gpu_memory_gib "
            f"{params['gpu_memory_gib']}")
    if memory["total"] > params["gpu_memory_gib"]:
        raise ValueError(f"{line}: does not fit; set engine_params.optimizer_cpu_offload: true, more actor_gpus "
                         "/ expert_parallel, or fewer max_tokens_per_gpu")
    return line


def check_context(params: dict, shape: dict) -> str:
    context, response = model_context(params, shape), params["rollout_max_response_len"]
    if response >= context:
        raise ValueError(f"engine_params.rollout_max_response_len = {response} leaves no room for a prompt in the "
                         f"model's context of {context} tokens (rollout_max_context_len)")
    return f"context: {context} tokens = prompts up to {context - response} + responses up to {response}"


# --- extra_args ----------------------------------------------------------------------------------

def known_flags() -> tuple[set[str], tuple[str, ...]]:
    lines = [line for line in KNOWN_FLAGS.read_text().splitlines() if line and not line.startswith("#")]
    return {line for line in lines if not line.endswith("*")}, tuple(line[:-1] for line in lines if line.endswith("*"))


def check_extra_args(extra_args: list, emitted: set[str], script_flags: tuple = ()) -> str:
    flags, prefixes = known_flags()
    for arg in map(str, extra_args):
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag in script_flags:
            raise ValueError(f"engine_params.extra_args sets {flag}, which slime's model script sets too "
                             "(engines/slime/models.yaml script_flags): its MODEL_ARGS come last, so the "
                             "extra_args value would be silently overridden")
        if flag in emitted or flag in OWNED_FLAGS:
            raise ValueError(f"engine_params.extra_args sets {flag}, which the launcher owns: set it through its "
                             "engine_params key (argparse keeps the last value, so the override would change the run)")
        if flag not in flags and not flag.startswith(prefixes):
            raise ValueError(f"engine_params.extra_args: {flag} is not a flag of slime, Megatron-LM or SGLang at the "
                             f"pinned commits ({KNOWN_FLAGS.name}); slime would ignore it silently")
    return f"extra_args: {len(extra_args)} argument(s), none owned or unknown"


def runs_under_way(run: RunDir) -> list[Path]:
    """This run's train folder, then those of its grid's other runs that started and have not finished
    (completed or diverged): their jobs write to the same file system and may have started with this one."""
    try:
        grid = run.grid_dir
    except ValueError:  # a run folder outside a grid's layout: this run alone
        return [run.train_dir]
    others = [RunDir(path) for path in sorted(grid.glob("runs/*/lag*/seed*")) if path.resolve() != run.path.resolve()]
    return [run.train_dir] + [other.train_dir for other in others
                              if (other.read_status() or {}).get("status") not in ("completed", "diverged")]


def preflight(run_config: RunConfig, run: RunDir, emitted: set[str], *, check_files: bool, reward=None,
              on_node: bool = False, mem_mb: int | None = None) -> list[str]:
    """Every check; the report lines. ``reward``: the scorer (default: the rule model). ``on_node`` (the
    job itself): the run's file system must hold its disk estimate and ``mem_mb`` (the job's memory)
    its host memory estimate (engines.slime.footprint); the dry run prints the estimates."""
    params = run_config.engine_params
    shape = model_shape(params["model_type"])
    lines = [check_reward(params, reward or rule_reward(params["rm_type"]))]
    if check_files:
        lines.append(check_prompts(params))
    return lines + [
        check_memory(params, shape), check_context(params, shape),
        check_host_memory(params, replay=run_config.recipe.replay, lag=run_config.lag, mem_mb=mem_mb),
        check_disk(params, steps=run_config.steps, eval_every=run_config.eval_every,
                   train_dirs=runs_under_way(run) if on_node else None),
        check_spill(params, replay=run_config.recipe.replay, lag=run_config.lag, mem_mb=mem_mb, on_node=on_node),
        check_extra_args(params["extra_args"], emitted, tuple(shape.get("script_flags", ())))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The slime job's pre-flight checks (with slime's reward functions).")
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        run = RunDir(args.run_dir.resolve())
        run_config = RunConfig.check(run.read_config())  # the config the run folder pins
        emitted = {flag[0] for flag in slime_flags(run_config, run, extra=False)}
        params = run_config.engine_params
        memory = os.environ.get("SLURM_MEM_PER_NODE")  # sbatch --mem, in MB (the train rule's mem_mb)
        lines = preflight(run_config, run, emitted, check_files=True, reward=slime_reward(params["rm_type"]),
                          on_node=True, mem_mb=int(memory) if memory else None)
    except (ValueError, OSError, ImportError) as error:  # ImportError: slime missing, not in the container
        raise SystemExit(f"engines.slime.preflight: {error}") from None
    print("\n".join(f"pre-flight: {line}" for line in lines), file=sys.stderr)


if __name__ == "__main__":
    main()
