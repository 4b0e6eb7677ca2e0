"""Launch one run on slime: a resolved run config -> one self-contained job script -> train/ on disk.

    run(run_config, run_dir)              write the job script, execute it, publish checkpoints, status
    write_job_script(run_config, run_dir) the dry run: check everything, write train/job.sh, return it
    python -m engines.slime.launch --run-dir DIR --config-json JSON [--dry-run [--no-path-check]]

The script (train/job.sh) re-executes itself inside the pinned slime container (apptainer or
docker; ``container_runtime: none`` when already inside), checks slime's commit, starts a
private Ray head, submits ``train_async.py`` (interval lag: ``--update-weights-interval lag``) or
the harness's constant-lag driver (``python3 -m engines.slime.driver``) with every slime and
Megatron flag of the run, and stops its own Ray on exit. SLURM's time-limit warning (SIGURG)
makes the script touch train/stop_requested; the constant-lag driver then saves Megatron's state
after its current step and stops, and ``run`` raises TimeLimitReached (engines.run exits 75, the
retry resumes). slime's train_async.py (interval lag) has no such hook: it resumes from its last
``--save-interval`` save. It never kills other processes (slime's
example scripts run ``pkill -9 python``). The recipe reaches the trainer through
``--custom-config-path train/slime_custom.yaml`` (keys land on slime's args).

Checkpoints: Megatron's (for resuming) in train/megatron/, the last ``keep_megatron_checkpoints``
kept (engines.slime.retention, every few minutes while the job runs); HF ones written by slime's
``--save-hf train/hf/iter_{rollout_id}`` every ``eval_every`` steps and renamed to
train/checkpoints/step_<rollout_id + 1>/ when the job ends, where the evaluation stage finds them.
Only complete HF saves are published (harness.checkpoint); an interrupted one is reported in
train/status.json and left in train/hf/.

Everything is checked before the script is written: a recipe slime cannot express, a missing
model or data path, an unpinned container, inconsistent batch or parallel sizes, and the
pre-flight checks of engines.slime.preflight (reward vs prompt format, memory per GPU, context,
extra_args), whose report heads train/job.sh. The job runs the pre-flight again, with slime's own
reward functions, before it starts Ray.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from engines import TimeLimitReached
from engines.slime import loss as slime_loss
from engines.slime import preflight
from harness.checkpoint import hf_checkpoint_problem
from harness.cli import parse_json_arg
from harness.grid import check_lag
from harness.io import read_jsonl, write_json_atomic, write_text_atomic
from stabilizers import recipe_from_named_dict

REPO = Path(__file__).resolve().parents[2]
CONTAINER_PIN = REPO / "envs" / "slime-container.yaml"
RUNTIMES = ("apptainer", "docker", "none")
STOP_FILE = "stop_requested"  # train/<this>: the job script's mark that the time-limit warning came
MUTABLE_TAGS = re.compile(r"^(latest.*|main|master|dev|nightly|stable)$")

# engine_params of the slime engine, with their defaults (None = required). The paper's values
# (shared/reference/methods.md) are set in workflow/presets/table1.yaml.
DEFAULTS = {
    # software
    "container": None,               # image; default: envs/slime-container.yaml "image"
    "container_runtime": "apptainer",
    "slime_commit_check": "strict",  # strict | warn: slime_dir must be at the pinned commit
    "slime_dir": None,               # slime in the image; default: envs/slime-container.yaml paths_in_image
    "megatron_dir": None,            # Megatron-LM in the image; default: as slime_dir
    "binds": [],                     # host paths to mount in the container (model, data)
    "env": {},                       # extra environment of the job (NCCL_SOCKET_IFNAME, ...)
    # model and data
    "model_type": None,              # slime's scripts/models/<model_type>.sh gives MODEL_ARGS
    "hf_checkpoint": None,           # HF weights: SGLang's start weights and the tokenizer
    "ref_load": None,                # Megatron torch_dist conversion: start + KL reference
    "prompt_data": None,             # training prompts (JSONL)
    "input_key": "prompt",
    "label_key": "label",
    "apply_chat_template": False,
    "prompt_format": None,           # dapo | boxed | think: what the prompts make the policy write (preflight)
    "rm_type": None,                 # slime's reward (--rm-type): it must score prompt_format (preflight)
    "reward_key": None,              # the score's key when the reward returns a dict (dapo: score)
    # rollout
    "rollout_batch_size": None,      # prompts per step
    "n_samples_per_prompt": None,
    "global_batch_size": None,       # must be rollout_batch_size x n_samples_per_prompt (one step per rollout)
    "rollout_max_response_len": None,
    "rollout_temperature": 1.0,
    "rollout_top_p": 1.0,
    "rollout_top_k": -1,
    "rollout_max_context_len": None,  # prompt + response; None: the model's max_position_embeddings
    # resources and parallelism (one node)
    "gpus_per_node": 8,
    "actor_gpus": 4,
    "rollout_gpus": 4,
    "rollout_gpus_per_engine": 4,
    "tensor_parallel": 1,
    "pipeline_parallel": 1,
    "context_parallel": 1,
    "expert_parallel": 1,
    "expert_tensor_parallel": 1,
    "sequence_parallel": True,
    "max_tokens_per_gpu": 16384,
    "sglang_mem_fraction": 0.7,
    "gpu_memory_gib": None,          # memory of one GPU: the pre-flight memory estimate must fit in it
    "optimizer_cpu_offload": False,  # Adam states on the CPU (slime's Qwen3-30B-A3B example does this)
    # optimisation
    "lr": 1.0e-6,
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "weight_decay": 0.1,
    "clip_grad": 1.0,
    "kl_loss_coef": 0.0,
    "kl_loss_type": "low_var_kl",
    "entropy_coef": 0.0,
    "save_optimizer": True,          # False: smaller Megatron checkpoints, but a resume restarts Adam
    "keep_megatron_checkpoints": 2,  # the newest N Megatron saves are kept (HF ones all stay)
    "extra_args": [],                # further slime / Megatron / SGLang flags (none the launcher sets)
}
OPTIONAL = ("reward_key", "rollout_max_context_len")  # None is a valid value


def pinned_container() -> dict:
    return yaml.safe_load(CONTAINER_PIN.read_text())


def check_container(image: str) -> None:
    """An image reference is pinned when it names a digest, or a tag that is not a moving one."""
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        raise ValueError(f"engine_params.container must be an image reference, got {image!r}")
    name, _, digest = image.partition("@")
    if digest:
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ValueError(f"engine_params.container {image!r}: the digest must be sha256:<64 hex digits>")
        return
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not tag:
        raise ValueError(f"engine_params.container {image!r} is not pinned: give a version tag or an "
                         "@sha256 digest (an untagged image means 'latest', which moves)")
    if MUTABLE_TAGS.match(tag):
        raise ValueError(f"engine_params.container {image!r} is not pinned: tag {tag!r} moves; give a "
                         "version tag or an @sha256 digest (see envs/slime-container.yaml)")


def resolve_params(engine_params: dict) -> dict:
    if engine_params.get("vcpo_ess_lr"):
        raise ValueError("engine_params.vcpo_ess_lr (VCPO's ESS learning-rate scaling) is a tiny-engine switch: "
                         "slime's custom-loss hook cannot set Megatron's learning rate per optimizer step; "
                         "remove it (the ESS itself is logged as offpolicy/ess)")
    unknown = sorted(set(engine_params) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown slime engine_params {unknown}; known: {sorted(DEFAULTS)}")
    params = {**DEFAULTS, **engine_params}
    pin = pinned_container()
    for key, default in (("container", pin["image"]), ("slime_dir", pin["paths_in_image"]["slime"]),
                         ("megatron_dir", pin["paths_in_image"]["megatron_lm"])):
        if params[key] is None:
            params[key] = default
    missing = sorted(key for key, value in params.items() if value is None and key not in OPTIONAL)
    if missing:
        raise ValueError(f"slime engine_params missing required key(s) {missing}")
    check_container(params["container"])
    if params["container_runtime"] not in RUNTIMES:
        raise ValueError(f"engine_params.container_runtime = {params['container_runtime']!r}; "
                         f"expected one of {list(RUNTIMES)}")
    if params["slime_commit_check"] not in ("strict", "warn"):
        raise ValueError("engine_params.slime_commit_check must be 'strict' or 'warn'")
    for key in ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "rollout_max_response_len",
                "gpus_per_node", "actor_gpus", "rollout_gpus", "rollout_gpus_per_engine", "tensor_parallel",
                "pipeline_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel",
                "max_tokens_per_gpu", "keep_megatron_checkpoints"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"engine_params.{key} must be an integer >= 1, got {value!r}")
    per_step = params["rollout_batch_size"] * params["n_samples_per_prompt"]
    if params["global_batch_size"] != per_step:
        raise ValueError(f"engine_params.global_batch_size = {params['global_batch_size']} but one rollout holds "
                         f"rollout_batch_size x n_samples_per_prompt = {per_step} samples: the harness takes one "
                         "optimizer step per rollout (the paper's setting; step N = rollout N - 1)")
    if params["context_parallel"] != 1:
        raise ValueError("engine_params.context_parallel must be 1: the loss adapter needs each response whole on "
                         "one rank (GSPO's sequence ratio, the |d| statistics)")
    model_parallel = params["tensor_parallel"] * params["pipeline_parallel"] * params["context_parallel"]
    if params["actor_gpus"] % model_parallel:
        raise ValueError(f"engine_params.actor_gpus = {params['actor_gpus']} is not a multiple of "
                         f"tensor x pipeline x context parallel = {model_parallel}")
    if params["actor_gpus"] + params["rollout_gpus"] > params["gpus_per_node"]:
        raise ValueError(f"actor_gpus + rollout_gpus = {params['actor_gpus'] + params['rollout_gpus']} exceeds "
                         f"gpus_per_node = {params['gpus_per_node']} (the job runs on one node)")
    if params["rollout_gpus"] % params["rollout_gpus_per_engine"]:
        raise ValueError("engine_params.rollout_gpus must be a multiple of rollout_gpus_per_engine")
    if params["rollout_top_p"] != 1.0:
        raise ValueError("engine_params.rollout_top_p must be 1.0 (the paper's; slime's top-p log-prob replay "
                         "is not wired into the loss adapter)")
    if params["prompt_format"] not in preflight.PROMPT_FORMATS:
        raise ValueError(f"engine_params.prompt_format = {params['prompt_format']!r}; expected one of "
                         f"{sorted(preflight.PROMPT_FORMATS)}")
    context = params["rollout_max_context_len"]
    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 2):
        raise ValueError(f"engine_params.rollout_max_context_len must be null or an integer >= 2, got {context!r}")
    memory = params["gpu_memory_gib"]
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory <= 0:
        raise ValueError(f"engine_params.gpu_memory_gib must be a number > 0, got {memory!r}")
    if not isinstance(params["extra_args"], list) or not isinstance(params["binds"], list):
        raise ValueError("engine_params.extra_args and engine_params.binds must be lists")
    slime_loss.refuse_unhandled_flags(params["extra_args"])
    if not isinstance(params["env"], dict):
        raise ValueError("engine_params.env must be a mapping")
    return params


def check_paths(params: dict) -> None:
    """The model and data the job reads must exist (on the machine that writes the job: the job node)."""
    for key in ("hf_checkpoint", "ref_load", "prompt_data"):
        if not Path(params[key]).exists():
            raise FileNotFoundError(f"engine_params.{key}: {params[key]} does not exist")


def recipe_of(run_config: dict):
    recipe = recipe_from_named_dict(run_config["recipe"], "run config 'recipe'")
    slime_loss.aggregation_of(recipe)  # raises for a loss slime has no normalisation for
    return recipe


def custom_config(run_config: dict, run_dir: Path) -> dict:
    """The --custom-config-path YAML: its keys land on slime's args (see engines.slime.loss / metrics)."""
    return {"stalebench_recipe": dict(run_config["recipe"]), "stalebench_run_dir": str(run_dir),
            "stalebench_lag_mode": run_config["lag_mode"], "stalebench_lag": run_config["lag"],
            "stalebench_run_key": run_config.get("run_key")}


def slime_flags(run_config: dict, params: dict, run_dir: Path, *, extra: bool = True) -> list[tuple[str, ...]]:
    """Every slime / Megatron flag of the run, one tuple per flag (flag, *values), extra_args last
    unless ``extra`` is False; MODEL_ARGS come from the model's script in the container."""
    recipe = recipe_of(run_config)
    context = preflight.model_context(params, preflight.model_shape(params["model_type"]))
    train = run_dir / "train"
    eps_low, eps_high = recipe.params.get("eps_low", 0.2), recipe.params.get("eps_high", 0.2)
    flags = [
        # model, checkpoints, resume
        ("--hf-checkpoint", params["hf_checkpoint"]), ("--ref-load", params["ref_load"]),
        ("--load", str(train / "megatron")), ("--save", str(train / "megatron")),
        ("--save-interval", str(run_config["eval_every"])),
        ("--save-hf", str(train / "hf" / "iter_{rollout_id}")),
        *([] if params["save_optimizer"] else [("--no-save-optim",)]),
        ("--seed", str(run_config["seed"])), ("--rollout-seed", str(run_config["seed"])),
        # data and rollout
        ("--prompt-data", params["prompt_data"]), ("--input-key", params["input_key"]),
        ("--label-key", params["label_key"]), *([("--apply-chat-template",)] if params["apply_chat_template"] else []),
        ("--rollout-shuffle",), ("--rm-type", params["rm_type"]),
        *([("--reward-key", params["reward_key"])] if params["reward_key"] else []),
        ("--num-rollout", str(run_config["steps"])),
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
        ("--custom-loss-function-path", "engines.slime.loss.policy_loss"),
        *([("--calculate-per-token-loss",)] if slime_loss.per_token_loss_flag(recipe) else []),
        # slime's built-in clip, unused by the custom loss: set to the recipe's for the record
        ("--eps-clip", str(eps_low)), ("--eps-clip-high", str(eps_high)),
        *([("--use-rollout-routing-replay",)] if recipe.routing_replay else []),
        *([("--use-kl-loss",), ("--kl-loss-coef", str(params["kl_loss_coef"])),
           ("--kl-loss-type", params["kl_loss_type"])] if params["kl_loss_coef"] else []),
        ("--kl-coef", "0.0"), ("--entropy-coef", str(params["entropy_coef"])),
        # the lag
        *([("--update-weights-interval", str(run_config["lag"]))] if run_config["lag_mode"] == "interval" else []),
        # the harness's hooks
        ("--custom-config-path", str(train / "slime_custom.yaml")),
        ("--rollout-data-postprocess-path", "engines.slime.metrics.postprocess"),
        ("--custom-rollout-log-function-path", "engines.slime.metrics.log_rollout"),
        # numerics (slime's recommended settings for Qwen3 MoE)
        ("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0"),
        ("--accumulate-allreduce-grads-in-fp32",), ("--attention-softmax-in-fp32",),
        ("--attention-backend", "flash"),
    ]
    if params["optimizer_cpu_offload"]:  # as slime's own Qwen3-30B-A3B script
        flags += [("--optimizer-cpu-offload",), ("--overlap-cpu-optimizer-d2h-h2d",), ("--use-precision-aware-optimizer",)]
    if extra and params["extra_args"]:
        flags.append(tuple(str(arg) for arg in params["extra_args"]))
    return flags


def entrypoint(run_config: dict) -> list[str]:
    if run_config["lag_mode"] == "interval":
        return ["python3", "$SLIME_DIR/train_async.py"]
    return ["python3", "-m", "engines.slime.driver"]


def container_prefix(params: dict, binds: list[str]) -> str:
    """How the script re-executes itself inside the container."""
    image = params["container"]
    if params["container_runtime"] == "apptainer":
        mounts = " ".join(f"--bind {shlex.quote(b)}" for b in binds)
        return f"apptainer exec --nv --cleanenv --env STALEBENCH_IN_CONTAINER=1 {mounts} docker://{image}"
    mounts = " ".join(f"-v {shlex.quote(b)}:{shlex.quote(b)}" for b in binds)
    return (f"docker run --rm --gpus all --ipc=host --shm-size=32g --network=host -e STALEBENCH_IN_CONTAINER=1 "
            f"{mounts} {image}")


def job_script_text(run_config: dict, run_dir: str | Path, *, check_files: bool = True) -> str:
    """The job script of one run (validates the config first; see the module docstring)."""
    run_dir = Path(run_dir).resolve()
    if run_config.get("engine") != "slime":
        raise ValueError(f"run config engine = {run_config.get('engine')!r}, not 'slime'")
    check_lag(run_config["lag"], run_config["lag_mode"])
    for key in ("steps", "eval_every"):
        if isinstance(run_config.get(key), bool) or not isinstance(run_config.get(key), int) or run_config[key] < 1:
            raise ValueError(f"run config {key!r} must be an integer >= 1, got {run_config.get(key)!r}")
    params = resolve_params(run_config.get("engine_params") or {})
    if check_files:
        check_paths(params)
    pin = pinned_container()
    flags = slime_flags(run_config, params, run_dir)
    emitted = {flag[0] for flag in slime_flags(run_config, params, run_dir, extra=False)}
    report = preflight.preflight(params, emitted, check_files=check_files)
    # mount the harness, the run and what the job reads at the same paths inside the container
    data = [params["hf_checkpoint"], params["ref_load"], str(Path(params["prompt_data"]).parent), *params["binds"]]
    binds = sorted({str(REPO), str(run_dir), *(str(Path(p).resolve()) for p in data)})
    runtime_env = json.dumps({"env_vars": {"PYTHONPATH": f"{params['megatron_dir']}:{REPO}", "PYTHONUNBUFFERED": "1",
                                           "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                           **{str(k): str(v) for k, v in params["env"].items()}}})
    recipe = run_config["recipe"]["name"]
    lines = [
        "#!/usr/bin/env bash",
        f"# stalebench slime job: recipe {recipe}, lag {run_config['lag']} ({run_config['lag_mode']}), "
        f"seed {run_config['seed']}, run key {run_config.get('run_key')}",
        "# Generated by engines.slime.launch from the run's config.json; regenerate rather than edit.",
        *[f"# pre-flight: {line}" for line in report],
        "set -euo pipefail",
        f"RUN_DIR={shlex.quote(str(run_dir))}",
        f"REPO={shlex.quote(str(REPO))}",
        f"SLIME_DIR={shlex.quote(params['slime_dir'])}",
        f"SLIME_COMMIT={pin['slime']['commit']}",
    ]
    lines += [
        "# SLURM's time-limit warning (sbatch --signal=URG@<s>, the engine's train resources) asks for a",
        "# Megatron save now: the constant-lag driver saves after its current step and stops. The trap comes",
        "# before anything starts (bash ignores SIGURG without one, so an early warning would be lost); the",
        "# last attempt's mark is cleared once per job, outside the container. bash runs the trap during",
        "# `wait` at once, after a foreground command when that ends.",
        f'if [ -z "${{STALEBENCH_IN_CONTAINER:-}}" ]; then rm -f "$RUN_DIR/train/{STOP_FILE}"; fi',
        f"trap 'touch \"$RUN_DIR/train/{STOP_FILE}\"' URG",
    ]
    if params["container_runtime"] != "none":
        lines += ['if [ -z "${STALEBENCH_IN_CONTAINER:-}" ]; then',
                  f'  exec {container_prefix(params, binds)} bash "$0"', "fi"]
    check = ('  echo "slime at $SLIME_DIR is at commit $found, not the pinned $SLIME_COMMIT '
             '(envs/slime-container.yaml)" >&2')
    lines += [
        'found=$(git -C "$SLIME_DIR" rev-parse HEAD 2>/dev/null || echo unknown)',
        'if [ "$found" != "$SLIME_COMMIT" ]; then',
        check,
        *(["  exit 3"] if params["slime_commit_check"] == "strict" else []),
        "fi",
        'echo "$found" > "$RUN_DIR/train/slime_commit.txt"',
        f"source \"$SLIME_DIR/scripts/models/{params['model_type']}.sh\"  # defines MODEL_ARGS",
        *[f"export {k}={shlex.quote(str(v))}" for k, v in sorted(params["env"].items())],
        "export PYTHONUNBUFFERED=1",
        "# the pre-flight checks again, with slime's own reward functions, before any GPU work",
        'PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" python3 -m engines.slime.preflight --run-dir "$RUN_DIR"',
        'export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"',
        "# a private Ray head for this job, stopped on exit; nothing else on the node is touched",
        f'ray start --head --node-ip-address "$MASTER_ADDR" --num-gpus {params["gpus_per_node"]} '
        "--disable-usage-stats --dashboard-host=127.0.0.1 --dashboard-port=8265",
        f"# keep the newest {params['keep_megatron_checkpoints']} Megatron checkpoints while the job runs",
        (f'prune() {{ PYTHONPATH="$REPO" python3 -m engines.slime.retention "$RUN_DIR/train/megatron" '
         f"--keep {params['keep_megatron_checkpoints']}; }}"),
        "# (its sleep is killed with it: an orphaned sleep would hold the job's output open for minutes)",
        """(trap 'kill "$nap" 2>/dev/null; exit 0' TERM; while true; do sleep 300 & nap=$!; wait "$nap"; prune; done) &""",
        "PRUNER=$!",
        "trap 'kill $PRUNER 2>/dev/null || true; ray stop; prune' EXIT",
        f"RUNTIME_ENV={shlex.quote(runtime_env)}",
        'ray job submit --address="http://127.0.0.1:8265" --runtime-env-json="$RUNTIME_ENV" \\',
        f"  -- {' '.join(entrypoint(run_config))} \\",
    ]
    lines += [f"  {' '.join(shlex.quote(part) for part in flag)} \\" for flag in flags]
    lines += [
        '  "${MODEL_ARGS[@]}" &',
        "submit=$!",
        'status=0; wait "$submit" || status=$?',
        'while kill -0 "$submit" 2>/dev/null; do status=0; wait "$submit" || status=$?; done',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def write_job_script(run_config: dict, run_dir: str | Path, *, check_files: bool = True) -> Path:
    """The dry run: check everything, write train/job.sh and train/slime_custom.yaml; return the script."""
    run_dir = Path(run_dir).resolve()
    text = job_script_text(run_config, run_dir, check_files=check_files)
    train = run_dir / "train"
    write_text_atomic(train / "slime_custom.yaml", yaml.safe_dump(custom_config(run_config, run_dir), sort_keys=True))
    write_json_atomic(train / "run_config.json", run_config)  # what the job's pre-flight reads
    write_text_atomic(train / "job.sh", text)
    (train / "job.sh").chmod(0o755)
    return train / "job.sh"


def publish_hf_checkpoints(run_dir: str | Path, run_config: dict | None = None) -> tuple[list[Path], list[str]]:
    """Rename slime's complete HF saves train/hf/iter_<r>/ to train/checkpoints/step_<r + 1>/ (the
    layout the evaluation stage reads). Returns (published, problems): an incomplete save
    (harness.checkpoint: index + every shard it names) stays where it is and is reported, never
    published. With the run config, a save off the evaluation cadence (made at a time-limit stop)
    is deleted instead: the evaluated steps are those of an uninterrupted run."""
    train = Path(run_dir) / "train"
    published, problems = [], []
    for source in sorted((train / "hf").glob("iter_*")):
        match = re.fullmatch(r"iter_(\d+)", source.name)
        if not match:
            continue
        if problem := hf_checkpoint_problem(source):
            problems.append(problem)
            continue
        step = int(match.group(1)) + 1
        if run_config and step % run_config["eval_every"] and step != run_config["steps"]:
            shutil.rmtree(source)
            continue
        target = train / "checkpoints" / f"step_{step}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # saved again by a resumed job: the newer save wins
            old = target.with_name(target.name + ".replaced")
            target.rename(old)
            source.rename(target)
            shutil.rmtree(old)
        else:
            source.rename(target)
        published.append(target)
    return published, problems


def final_status(run_config: dict, run_dir: Path, returncode: int) -> dict:
    rows = read_jsonl(run_dir / "train" / "metrics.jsonl")
    last = rows[-1]["step"] if rows else 0
    for row in rows:
        if not all(math.isfinite(row.get(key, 0.0)) for key in ("loss", "grad_norm")):
            return {"status": "diverged", "step": row["step"], "message": f"non-finite loss or grad norm at step {row['step']}"}
    if returncode == 0 and last == run_config["steps"]:
        return {"status": "completed", "step": last, "message": f"completed {last} steps"}
    return {"status": "failed", "step": last, "message": f"slime job exited with code {returncode} after step {last}"}


def run(run_config: dict, run_dir: str | Path) -> str:
    """Train (or resume) one run on slime; returns its final status (failed raises after writing it)."""
    run_dir = Path(run_dir).resolve()
    script = write_job_script(run_config, run_dir)
    returncode = subprocess.run(["bash", str(script)], cwd=run_dir).returncode
    _, incomplete = publish_hf_checkpoints(run_dir, run_config)
    for problem in incomplete:
        print(f"engines.slime.launch: incomplete HF checkpoint not published: {problem}", file=sys.stderr)
    status = final_status(run_config, run_dir, returncode)
    if status["status"] == "failed" and (run_dir / "train" / STOP_FILE).exists():
        raise TimeLimitReached(f"stopped after step {status['step']} of {run_config['steps']} at the time-limit "
                               "warning; Megatron state saved, run again to continue")
    if incomplete:
        status["incomplete_hf_checkpoints"] = incomplete
    write_json_atomic(run_dir / "train" / "status.json", status)
    if status["status"] == "failed":
        raise RuntimeError(f"{run_dir}: {status['message']} (log: the job's output above)")
    return status["status"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write (and run) the slime job of one run.")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config-json", required=True, help="resolved run config, inline JSON or a file path")
    parser.add_argument("--dry-run", action="store_true", help="write train/job.sh and print it; run nothing")
    parser.add_argument("--no-path-check", action="store_true",
                        help="with --dry-run: do not require the model and data paths to exist here")
    args = parser.parse_args(argv)
    run_config = parse_json_arg(args.config_json, "--config-json")
    try:
        if args.dry_run:
            print(write_job_script(run_config, args.run_dir, check_files=not args.no_path_check).read_text())
        else:
            print(f"engines.slime.launch: {run(run_config, args.run_dir)}", file=sys.stderr)
    except (ValueError, FileNotFoundError, KeyError) as error:
        raise SystemExit(f"engines.slime.launch: {error}") from None


if __name__ == "__main__":
    main()
