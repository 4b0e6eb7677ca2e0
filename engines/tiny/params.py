"""Engine parameters of the tiny engine: two presets and their overrides.

``engine_params = {"preset": "demo" | "llm-regime", <knob>: value, ...}``; any knob below may be
overridden, an unknown key is an error. Measured behaviour of each preset: docs/findings.md.

demo        close to a single-file prototype (not in this repository): 16 prompts x 8 samples,
            2 Adam minibatches per step, but lr 3e-4 (at the prototype's 5e-4 GRPO collapsed
            here even at lag 1). Fixed-clip GRPO loses ~0.14 greedy exact match at lag 8 vs 1.
stress      demo at lr 7e-4 and engine version 2 (its calibration: docs/demo-calibration.md; C1 below was
            engine version 1's), for the collapse statistics, with CONSTANT lag (workflow/presets/field.yaml:
            200 steps, eval on 64 problems x 4 samples). Calibrated on GRPO only, 10 seeds per cell, dev box:
            collapse lag 1 1/10, lag 2 0/10, lag 4 0/10, lag 8 6/10, lag 16 5/10 (target: lag 8 >= 1/3,
            lag 1 <= 1/10). With interval lag (realized lag cycling 1..lag) lag 8 collapsed only 1/10:
            scores dipped and recovered (docs/findings.md, the calibration of `stress`).
llm-regime  a lower-entropy policy (150 warm-start steps instead of 100: greedy exact match 0.99
            instead of 0.82) and lr 2e-4, aiming at mean |d| ~0.005-0.02 at lag 1 with a heavy
            tail, like the paper's d-bar column, with SAT's quantile q far below log(1 + eps_high)
            so that its gate binds at both lags.

version (any preset): the engine's arithmetic version, 1 (default), 2 or 3 (in code `arithmetic`: in this
engine a bare "version" is a policy version, the step of the weights a snapshot holds, harness.lag).
A run's resolved params carry it only when it is not 1, so every run key of the engine before versions
existed is unchanged (a finished grid is not refused after an upgrade); provenance.json records it for
every attempt (`arithmetic_version`). 1: the arithmetic all
results up to issue 48 were computed with, kept bit for bit. 2 (issue 48): a bfloat16 rollout samples with whichever arithmetic is fastest on the CPU at hand
(rollout.py's fast_bf16_matmuls: bf16 kernels with AVX512-BF16, else the bf16 engine's arithmetic in
float32, rollout_bf16.py), and the float32 sampler pass that only d/lag_mean_abs and d/impl_mean_abs
read runs for the rows of checkpoint steps (the other rows omit both). With fast bf16 kernels its
training is version 1's bit for bit; deterministic per machine, not across kernel levels. 3 (issue 66):
version 2 with each prompt's forward computed once for its samples (the rollout: model.generate's repeats;
the recompute and the update: prefix.forward_shared_prefix) and the MoE's experts in grouped matmuls
(model.use_grouped_experts): the same function, rounded differently, so its own numbers.

rollout_dtype (any preset): bfloat16 (default), float16, float32, or bfloat16_emulated: the bf16
engine's arithmetic in float32 (rollout_bf16.py), the same mismatch without a bf16 matmul, for CPUs
without fast bf16 (not the default: docs/demo-calibration.md has the rule that would make it one).
"""
from __future__ import annotations

# the rollout engine's weights and arithmetic (rollout.py; bfloat16_emulated: rollout_bf16.py)
ROLLOUT_DTYPES = ("bfloat16", "float16", "float32", "bfloat16_emulated")
ARITHMETIC_VERSIONS = (1, 2, 3)  # engine_params.version (the module docstring); 1 = before versions existed
MODEL_KNOBS = ("width", "layers", "heads", "experts", "top_k", "expert_hidden")
WARMSTART_KNOBS = ("warmstart_steps", "warmstart_lr", "warmstart_batch", "warmstart_seed")
# what the lag-0 null check reads besides the base model (engines/tiny/null_ratios.py): the sampler
NULL_CHECK_KNOBS = ("preset", "version", "rollout_dtype", "temperature", "prompts_per_step", "samples_per_step", "reward")

DEMO = {
    # model (the prototype's size, FFN as 4 experts)
    "width": 64, "layers": 2, "heads": 4, "experts": 4, "top_k": 1, "expert_hidden": 128,
    # supervised warm start that makes the base model
    "warmstart_steps": 100, "warmstart_lr": 1e-3, "warmstart_batch": 128, "warmstart_seed": 0,
    # RL
    "lr": 3e-4, "prompts_per_step": 16, "samples_per_step": 8, "minibatches": 2,
    "adam_betas": [0.9, 0.999], "max_grad_norm": None, "kl_coef": 0.0,
    "reward": "partial", "temperature": 1.0, "rollout_dtype": "bfloat16",
    # VCPO (arXiv 2602.17616): scale each Adam step's lr by sqrt(min(1, ESS / B)) of its minibatch
    "vcpo_ess_lr": False,
    "progress_every": 50,
}

PRESETS = {
    "demo": DEMO,
    "llm-regime": {**DEMO, "warmstart_steps": 150, "lr": 2e-4},
    # engine version 2 since its calibration (docs/demo-calibration.md); `version: 1` gives the earlier grids' runs
    "stress": {**DEMO, "lr": 7e-4, "version": 2},
}


def resolve_engine_params(engine_params: dict | None) -> dict:
    """The preset's knobs updated by the overrides; unknown keys or bad values raise ValueError."""
    params = dict(engine_params or {})
    preset = params.pop("preset", "demo")
    if preset not in PRESETS:
        raise ValueError(f"engine_params.preset = {preset!r}; expected one of {sorted(PRESETS)}")
    known = set(PRESETS[preset]) | {"version"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"engine_params has unknown key(s) {unknown}; known: {sorted(known)}")
    resolved = {"preset": preset, **PRESETS[preset], **params}
    _check(resolved)
    if resolved.get("version", 1) == 1:  # version 1 is the absence of the key: run keys of before versions
        resolved.pop("version", None)
    return resolved


def arithmetic_version(params: dict) -> int:
    """The arithmetic version of resolved params (the module docstring)."""
    return params.get("version", 1)


def _check(p: dict) -> None:
    arithmetic = p.get("version", 1)
    if isinstance(arithmetic, bool) or arithmetic not in ARITHMETIC_VERSIONS:
        raise ValueError(f"engine_params.version must be one of {list(ARITHMETIC_VERSIONS)}, got {arithmetic!r}")
    positive_ints = MODEL_KNOBS + ("warmstart_steps", "warmstart_batch", "prompts_per_step",
                                   "samples_per_step", "minibatches", "progress_every")
    for key in positive_ints:
        if isinstance(p[key], bool) or not isinstance(p[key], int) or p[key] < 1:
            raise ValueError(f"engine_params.{key} must be a positive integer, got {p[key]!r}")
    for key in ("lr", "warmstart_lr", "temperature"):
        if not isinstance(p[key], (int, float)) or not p[key] > 0:
            raise ValueError(f"engine_params.{key} must be a positive number, got {p[key]!r}")
    if not isinstance(p["kl_coef"], (int, float)) or p["kl_coef"] < 0:
        raise ValueError(f"engine_params.kl_coef must be a number >= 0, got {p['kl_coef']!r}")
    if p["max_grad_norm"] is not None and not (isinstance(p["max_grad_norm"], (int, float)) and p["max_grad_norm"] > 0):
        raise ValueError(f"engine_params.max_grad_norm must be null or > 0, got {p['max_grad_norm']!r}")
    if not isinstance(p["vcpo_ess_lr"], bool):
        raise ValueError(f"engine_params.vcpo_ess_lr must be true or false, got {p['vcpo_ess_lr']!r}")
    if p["reward"] not in ("exact", "partial"):
        raise ValueError(f"engine_params.reward must be 'exact' or 'partial', got {p['reward']!r}")
    if p["rollout_dtype"] not in ROLLOUT_DTYPES:
        raise ValueError(f"engine_params.rollout_dtype must be one of {list(ROLLOUT_DTYPES)}, got {p['rollout_dtype']!r}")
    if p["top_k"] > p["experts"]:
        raise ValueError(f"engine_params.top_k ({p['top_k']}) must be <= experts ({p['experts']})")
    betas = p["adam_betas"]
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2 and all(0 <= b < 1 for b in betas)):
        raise ValueError(f"engine_params.adam_betas must be two numbers in [0, 1), got {betas!r}")
    if p["samples_per_step"] < 2:
        raise ValueError("engine_params.samples_per_step must be >= 2 (group-normalised advantages)")
    if (p["prompts_per_step"] * p["samples_per_step"]) % p["minibatches"]:
        raise ValueError("engine_params.minibatches must divide prompts_per_step x samples_per_step")


def model_knobs(params: dict) -> dict:
    return {k: params[k] for k in MODEL_KNOBS}


def warmstart_knobs(params: dict) -> dict:
    """What determines the base model: a base is reused only when these are equal (and the
    workflow's prepare job is given only these: harness.engine.Engine.prepare_keys)."""
    return {k: params[k] for k in MODEL_KNOBS + WARMSTART_KNOBS}
