"""The slime engine's parameters: engine_params with their defaults, checked without touching the disk
(``resolve_params``, what the config check and ``snakemake -n`` call), the container pin
(envs/slime-container.yaml), and what the model's shape and context are (engines/slime/models.yaml,
the checkpoint's config.json)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from engines.slime import loss as slime_loss
from harness.images import check_image as check_image_reference

REPO = Path(__file__).resolve().parents[2]
CONTAINER_PIN = REPO / "envs" / "slime-container.yaml"
MODELS = Path(__file__).resolve().parent / "models.yaml"
RUNTIMES = ("apptainer", "docker", "none")
MUTABLE_TAGS = re.compile(r"^(latest.*|main|master|dev|nightly|stable)$")

# What the prompts make the policy write, and the text every prompt of that format carries.
PROMPT_FORMATS = {
    "dapo": ("a last line 'Answer: <integer>' (DAPO-Math-17k prompts)", "Answer:"),
    "boxed": ("the final answer in \\boxed{...}", "\\boxed"),
    "think": ("reasoning closed by </think> (a thinking chat template), then \\boxed{...}", None),
}

# engine_params of the slime engine, with their defaults (None = required). The paper's values
# (the SAT paper, arXiv 2607.18722) are set in workflow/presets/table1.yaml.
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
    "precision": "bf16",             # bf16 (slime's default) or fp16: Megatron's --fp16 (arXiv 2510.26788)
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
    # Ray's temp dir on the node (ray start --temp-dir): its sockets, logs and the object store's spill
    # (engines.slime.footprint.object_store); node-local, never a shared file system
    "ray_temp_dir": "/tmp/ray",
    "extra_args": [],                # further slime / Megatron / SGLang flags (none the launcher sets)
}
OPTIONAL = ("reward_key", "rollout_max_context_len")
RAY_TEMP_DIR_MAX = 50  # None is a valid value

# slime / Megatron flags that would make a resumed job differ from an uninterrupted run, refused in
# extra_args with the reason. slime sets the first three itself on a job with no Megatron save to load
# (slime/utils/arguments.py); on a resume they would throw away what the save holds.
RESUME_BREAKING_FLAGS = {
    "--no-load-optim": "a resumed job would start Adam's moments and step count afresh",
    "--no-load-rng": "a resumed job would not restore the random states saved with its checkpoint",
    "--finetune": "a resumed job would load the weights only: Megatron's iteration, and with it slime's next "
                  "rollout id, restarts at 0, and Adam and the random states start afresh",
    "--start-rollout-id": "every job would start at that rollout instead of the one after its checkpoint's step",
    "--ckpt-step": "every job would load that step's save instead of its latest",
    "--no-save-rng": "the saves would hold no random states for a resumed job to restore",
    "--disable-rollout-global-dataset": "the data source's position would not be saved, so a resumed job would not "
                                        "continue the prompt sequence (engines.slime.driver)",
    "--load-main-params-from-ckpt": "Megatron requires --no-load-optim with it (validate_args): a resumed job would "
                                    "start Adam's moments and step count afresh",
    "--use-checkpoint-args": "a resumed job would take the model's arguments from its save, where the first job "
                             "took them from the command line",
    "--use-mp-args-from-checkpoint-args": "a resumed job would take its parallel layout from its save, where the "
                                          "first job took it from the command line",
    "--non-persistent-save-interval": "Megatron loads a newer non-persistent save (node-local or in memory with "
                                      "--non-persistent-ckpt-type local) before the persistent one: where a retry "
                                      "resumes would depend on the node it lands on, and neither the retention of "
                                      "Megatron saves nor the plan's disk counts them",
    "--non-persistent-ckpt-type": "see --non-persistent-save-interval: a resume would depend on the node the retry "
                                  "lands on",
}


def pinned_container() -> dict:
    return yaml.safe_load(CONTAINER_PIN.read_text())


def check_container(image: str) -> None:
    """An image reference is pinned when it names a digest, or a tag that is not a moving one; a local
    Apptainer image (a path ending in .sif) is a file, pinned by its contents."""
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        raise ValueError(f"engine_params.container must be an image reference, got {image!r}")
    if image.endswith(".sif"):
        return
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
    temp = params["ray_temp_dir"]
    # Ray's sockets live under it: a Unix socket path holds 107 bytes, and Ray adds ~50 (session_<date>/sockets/...)
    if not (isinstance(temp, str) and temp.startswith("/") and len(temp) <= RAY_TEMP_DIR_MAX):
        raise ValueError(f"engine_params.ray_temp_dir = {temp!r}: an absolute path of at most {RAY_TEMP_DIR_MAX} "
                         "characters on the node's own disk (Ray's Unix sockets live under it)")
    if params["precision"] not in ("bf16", "fp16"):
        raise ValueError(f"engine_params.precision = {params['precision']!r}; expected 'bf16' or 'fp16'")
    if params["prompt_format"] not in PROMPT_FORMATS:
        raise ValueError(f"engine_params.prompt_format = {params['prompt_format']!r}; expected one of "
                         f"{sorted(PROMPT_FORMATS)}")
    context = params["rollout_max_context_len"]
    if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 2):
        raise ValueError(f"engine_params.rollout_max_context_len must be null or an integer >= 2, got {context!r}")
    memory = params["gpu_memory_gib"]
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory <= 0:
        raise ValueError(f"engine_params.gpu_memory_gib must be a number > 0, got {memory!r}")
    if not isinstance(params["extra_args"], list) or not isinstance(params["binds"], list):
        raise ValueError("engine_params.extra_args and engine_params.binds must be lists")
    slime_loss.refuse_unhandled_flags(params["extra_args"])
    for flag in sorted({str(arg).split("=", 1)[0] for arg in params["extra_args"]} & set(RESUME_BREAKING_FLAGS)):
        raise ValueError(f"engine_params.extra_args sets {flag}: {RESUME_BREAKING_FLAGS[flag]}; a job stopped at "
                         "its time limit must resume with an uninterrupted run's state, so engines.slime refuses it")
    if not isinstance(params["env"], dict):
        raise ValueError("engine_params.env must be a mapping")
    return params


def check_paths(params: dict) -> None:
    """The model and data the job reads must exist (on the machine that writes the job: the job node),
    and the image must be one the node can start (check_image)."""
    for key in ("hf_checkpoint", "ref_load", "prompt_data"):
        if not Path(params[key]).exists():
            raise FileNotFoundError(f"engine_params.{key}: {params[key]} does not exist")
    check_image(params)


def check_image(params: dict) -> None:
    """A local .sif must exist and be run by Apptainer; a registry reference must name a registry the
    nodes reach (harness.images)."""
    image, runtime = params["container"], params["container_runtime"]
    if runtime == "none":  # already inside the image
        return
    if image.endswith(".sif") and runtime != "apptainer":
        raise ValueError(f"engine_params.container {image!r} is an Apptainer image: set container_runtime: "
                         f"apptainer (got {runtime!r})")
    check_image_reference(image, "engine_params.container")


def model_shape(model_type: str) -> dict:
    shapes = yaml.safe_load(MODELS.read_text())
    if model_type not in shapes:
        raise ValueError(f"engine_params.model_type = {model_type!r} has no shape in {MODELS}; add it from "
                         f"slime's scripts/models/{model_type}.sh")
    return shapes[model_type]


def model_context(params: dict, shape: dict) -> int:
    """The rollout context: engine_params.rollout_max_context_len, else the model's config.json, else
    engine/slime/models.yaml."""
    if params["rollout_max_context_len"] is not None:
        return params["rollout_max_context_len"]
    config = Path(params["hf_checkpoint"]) / "config.json"
    if config.is_file():
        return int(json.loads(config.read_text())["max_position_embeddings"])
    return shape["max_position_embeddings"]


def parameter_counts(shape: dict) -> tuple[int, int]:
    """(non-expert, expert) parameters of a Megatron GPT model with SwiGLU MLPs and RMSNorm."""
    h, layers = shape["hidden_size"], shape["num_layers"]
    q, kv = shape["num_attention_heads"] * shape["kv_channels"], shape["num_query_groups"] * shape["kv_channels"]
    attention = h * q + 2 * h * kv + q * h + (2 * shape["kv_channels"] if shape["qk_layernorm"] else 0)
    norms = 2 * h
    router = h * shape["num_experts"] if shape["num_experts"] else 0
    dense_mlp = 3 * h * shape["dense_ffn_hidden_size"]
    embeddings = shape["vocab_size"] * h * (2 if shape["untie_embeddings_and_output_weights"] else 1) + h
    experts = layers * shape["num_experts"] * 3 * h * shape["moe_ffn_hidden_size"]
    return layers * (attention + norms + router + dense_mlp) + embeddings, experts
