"""The GPU-hours of a slime grid before anything is submitted:
``python -m engines.slime.launch --plan CONFIG``.

Per job (recipe x lag x seed) and for the grid: training GPU-hours (steps x minutes per step x the
train job's GPUs), evaluation GPU-hours (checkpoints x minutes per checkpoint x the evaluate job's
GPUs), the time-limit stops expected at the train job's runtime, the retries the workflow gives the
train rule (grid.jobs.train_retries) and the evaluation's concurrency. A run's training time is
its steps, its periodic saves (the trainer waits), each attempt's start-up and each resumed attempt's
read of its Megatron save. The times are a low-high range: the user's own (``--timings FILE``, a YAML
``{step_minutes, checkpoint_minutes, drain_minutes, save_gb_per_s, startup_minutes}``, each [low,
high], once one run has measured them), else ESTIMATES from published figures where there are any
(their sources printed and in docs/cluster.md, Cost); the report names the input whose range moves the
grid's GPU-hours most. Disk and host memory: engines.slime.footprint.

The stop at the time-limit warning is budgeted too (``stop``): the driver's drain (it sees the
warning while it waits for a generation and after each training call or push, so what runs first is
at most one training call, bounded by a step's minutes), the data-source save (none left: each is made
right after its generation, engines.slime.driver) and the save itself: a stop off the evaluation
cadence writes the Megatron checkpoint only, but a warning that comes during a periodic step's
training or save waits for that save, which writes the HF copy too (bytes over a write bandwidth). The
train job's warning lead (``--signal=...@<s>`` in resources.train.slurm_extra) must cover the whole
budget at its slow end: a shorter one is refused with the lead it needs.
"""
from __future__ import annotations

import math

import yaml

from engines.slime import footprint
from engines.slime.params import REPO, model_shape, parameter_counts
from grid.jobs import rule_resources, train_retries, warning_lead_seconds
from grid.settings import Config
from stabilizers.recipes import recipe_from_named_dict

# Derived in docs/cluster.md ("Cost"): ~17 min of generation (20M tokens at ~20k tokens/s on one
# 4-GPU SGLang engine) overlapped with ~13 min of training (FLOPs at ~25% MFU on 4 GPUs).
STEP_MINUTES = (15.0, 25.0)
# The public end-to-end figure for this model: NeMo-RL v0.6's performance summary (GRPO on
# Qwen3-30B-A3B, DGX-H100, BF16): 1,102 tokens/s/GPU on-policy, 1,414 one step off
# (docs/cluster.md, Cost); a step's tokens are its samples x footprint.MID_RUN_RESPONSE_TOKENS.
TOKENS_PER_GPU_SECOND = (1_102, 1_414)
# A job's start before its first step (Ray, SGLang loading the HF weights, Megatron building the model):
# no public figure found, an estimate; a resumed job also reads its Megatron save (at the save's speed).
STARTUP_MINUTES = (5.0, 10.0)
# One checkpoint of AIME24: the weight swap (1-3 min, a 60 GB HF save read from the shared file
# system) plus 30 problems x k responses of ~5k-15k tokens, at the ~20k tokens/s of one 4-GPU engine
# (docs/cluster.md) once SATURATION requests are in flight, proportionally less with fewer.
SWAP_MINUTES = (1.0, 3.0)
RESPONSE_TOKENS = (5_000, 15_000)
TOKENS_PER_SECOND = 20_000
SATURATION = 64
AIME_PROBLEMS = 30
# A Megatron-LM save's write speed, slow end: 24 GB (GPT-1.5B, distributed optimizer) in 242 s on a
# 100 MB/s NAS, DLRover's flash-checkpoint blog (github.com/intelligent-machine-learning/dlrover,
# docs/blogs/megatron_flash_checkpoint.md); fast end: "about 6 to 8 minutes" for a Qwen3-30B-A3B save
# (NVIDIA-NeMo/RL issue 1208) of a 359 GB checkpoint directory (volcengine/verl issue 2408): 359 GB in
# 8 min. The user's measured `save_gb_per_s` replaces both.
SAVE_GB_PER_S = (24 / 242, 359 / 480)
PROFILE = REPO / "workflow" / "profiles" / "slurm" / "config.yaml"


def _pair(value, key: str) -> tuple[float, float]:
    low, high = (value, value) if isinstance(value, (int, float)) else value
    if not 0 < low <= high:
        raise ValueError(f"--timings {key} must be minutes > 0 or [low, high] with low <= high, got {value!r}")
    return float(low), float(high)


def timings(model: Config, given: dict | None = None) -> dict:
    """Minutes per step and per checkpoint (low, high) and where each comes from (``given``: the user's)."""
    given = given or {}
    k = model.eval.k
    concurrency = int(model.eval.server.get("concurrency", 1))
    in_flight = min(concurrency, AIME_PROBLEMS * k, SATURATION)
    rate = TOKENS_PER_SECOND * in_flight / SATURATION
    estimate = tuple(swap + AIME_PROBLEMS * k * tokens / rate / 60 for swap, tokens in zip(SWAP_MINUTES, RESPONSE_TOKENS))
    published = public_step_minutes(model)
    step = (min(STEP_MINUTES[0], published[0]), max(STEP_MINUTES[1], published[1]))
    return {
        "step": _pair(given["step_minutes"], "step_minutes") if "step_minutes" in given else step,
        "step_source": "--timings step_minutes (measured by the user)" if "step_minutes" in given
        else (f"estimate, not measured: docs/cluster.md Cost's derivation {STEP_MINUTES[0]:.0f}-{STEP_MINUTES[1]:.0f}, "
              f"NeMo-RL v0.6's {TOKENS_PER_GPU_SECOND[0]:,}-{TOKENS_PER_GPU_SECOND[1]:,} tokens/s/GPU for this model "
              f"{published[0]:.1f}-{published[1]:.1f}"),
        "checkpoint": _pair(given["checkpoint_minutes"], "checkpoint_minutes") if "checkpoint_minutes" in given
        else estimate,
        "checkpoint_source": "--timings checkpoint_minutes (measured by the user)" if "checkpoint_minutes" in given
        else "estimate, engines/slime/plan.py (not measured)",
        "concurrency": concurrency,
        "drain": _pair(given["drain_minutes"], "drain_minutes") if "drain_minutes" in given else step
        if "step_minutes" not in given else _pair(given["step_minutes"], "step_minutes"),
        "drain_source": "--timings drain_minutes (measured by the user)" if "drain_minutes" in given
        else "one training call, at most a step: the driver sees the warning while it waits for a generation",
        "save_gb_per_s": _pair(given["save_gb_per_s"], "save_gb_per_s") if "save_gb_per_s" in given else SAVE_GB_PER_S,
        "save_source": "--timings save_gb_per_s (measured by the user)" if "save_gb_per_s" in given
        else ("estimate, not measured: DLRover's Megatron-LM save on a 100 MB/s NAS to NeMo-RL's 6-8 min "
              "Qwen3-30B-A3B save, engines/slime/plan.py"),
        "startup": _pair(given["startup_minutes"], "startup_minutes") if "startup_minutes" in given else STARTUP_MINUTES,
        "startup_source": "--timings startup_minutes (measured by the user)" if "startup_minutes" in given
        else "estimate, not measured: no public figure found",
    }


def public_step_minutes(model: Config) -> tuple[float, float]:
    """Minutes per step (low, high) at NeMo-RL's published rates on the train job's GPUs."""
    params = model.engine_params
    tokens = params["rollout_batch_size"] * params["n_samples_per_prompt"] * footprint.MID_RUN_RESPONSE_TOKENS
    gpus = rule_resources(model.raw, "train")["gpu"]
    return tuple(tokens / (rate * gpus) / 60 for rate in reversed(TOKENS_PER_GPU_SECOND))


def stop(model: Config, times: dict) -> dict:
    """The time-limit stop's budget in minutes (low, high): drain + data-source save + a periodic save
    (Megatron + HF: the longest save a stop can wait for), against the warning's lead (None where the
    train job asks for no warning); ``lead_seconds``: the lead the budget needs."""
    params = model.engine_params
    parameters = sum(parameter_counts(model_shape(params["model_type"])))
    saves = footprint.disk(params, model.steps, model.eval_every)
    megatron, gigabytes = saves["megatron_save"] / 1e9, (saves["megatron_save"] + saves["hf_save"]) / 1e9

    def minutes(size):
        return tuple(size / rate / 60 for rate in reversed(times["save_gb_per_s"]))  # faster write, shorter save

    data_source = (0.0, 0.0)  # saved right after each generation, before its rollout trains
    lead = warning_lead_seconds(rule_resources(model.raw, "train"))
    total = tuple(d + s + w for d, s, w in zip(times["drain"], data_source, minutes(gigabytes)))
    return {"parameters": parameters, "gigabytes": gigabytes, "megatron_gigabytes": megatron, "drain": times["drain"],
            "data_source": data_source, "save": minutes(gigabytes), "megatron_save": minutes(megatron),
            "total": total, "warning": lead / 60 if lead else None, "lead_seconds": math.ceil(total[1] * 60),
            "exceeds": lead is not None and total[1] > lead / 60}


def concurrent_jobs(count: int) -> tuple[int, str]:
    """How many of ``count`` training jobs run at once: the SLURM profile's ``jobs``."""
    profile = yaml.safe_load(PROFILE.read_text())
    return min(count, int(profile["jobs"])), f"{PROFILE.relative_to(REPO)} jobs: {profile['jobs']}"


def replays(model: Config) -> dict[str, str | None]:
    """Each recipe's routing replay (None, "r2", "r3"), read from its resolved runs; a tuned recipe's is its
    variants' (grid.tuning: they vary loss parameters, never the replay)."""
    found = {run[0]: recipe_from_named_dict(run_config["recipe"], "config").replay
             for run, run_config in model.run_configs.items()}
    for recipe, candidates in (model.tuning.candidates.items() if model.tuning else ()):
        found.setdefault(recipe, found[candidates.variants[0]])
    return found


def grid_footprint(model: Config, jobs: list[tuple]) -> dict:
    """Disk per run and per grid of the training ``jobs``, the host memory of the largest job mid-run and
    at the response cap against the train rule's mem_mb (a job it cannot hold is refused), and Ray's
    object store of that job: what it holds, what spills, and where (engines.slime.footprint)."""
    params = model.engine_params
    run = footprint.disk(params, model.steps, model.eval_every)
    at_once, source = concurrent_jobs(len(jobs))
    replay = replays(model)
    recipe, lag = max(dict.fromkeys((recipe, lag) for recipe, lag, _ in jobs), key=lambda job: footprint.host_memory(
        params, replay=replay[job[0]], lag=job[1], response_tokens=footprint.MID_RUN_RESPONSE_TOKENS)["total"])
    mid = footprint.host_memory(params, replay=replay[recipe], lag=lag, response_tokens=footprint.MID_RUN_RESPONSE_TOKENS)
    cap = footprint.host_memory(params, replay=replay[recipe], lag=lag, response_tokens=params["rollout_max_response_len"])
    mem_mb = rule_resources(model.raw, "train").get("mem_mb")
    if mem_mb and mid["total"] > mem_mb * 1e6:
        raise ValueError(f"resources.train.mem_mb = {mem_mb:,} MB cannot hold {recipe} at lag {lag}: "
                         f"{footprint.describe_memory(mid)} (estimate, engines/slime/footprint.py); ask for more")
    store = [footprint.object_store(params, replay=replay[recipe], lag=lag, response_tokens=tokens, mem_mb=mem_mb)
             for tokens in (footprint.MID_RUN_RESPONSE_TOKENS, params["rollout_max_response_len"])]
    free, free_source = footprint.free_bytes(model.results_dir)
    count = len(jobs)
    # The grid's worst moment: its last `at_once` runs at their peak while every other run has ended and
    # keeps its saves. A cap on jobs at once saves only peak - kept (one Megatron save) per job: the
    # file system must hold every run's kept bytes whatever the cap.
    extra = run["peak"] - run["kept"]
    fits = min(count, int((free - count * run["kept"]) // extra) if extra else count) if free >= count * run["kept"] else None
    return {"run": run, "at_once": at_once, "at_once_source": source,
            "grid_peak": (count - at_once) * run["kept"] + at_once * run["peak"], "fits": fits,
            "grid_kept": count * run["kept"], "grid_written": count * run["written"],
            "free": free, "free_source": free_source, "memory": mid, "memory_cap": cap, "memory_job": (recipe, lag),
            "mem_mb": mem_mb, "object_store": store}


def plan(model: Config, given: dict | None = None) -> dict:
    """The grid's jobs with their GPU-hours (low, high), stops and retries, and the totals; with a
    ``tuning`` section its tuning runs are jobs too (the confirmation runs are the grid's runs)."""
    times = timings(model, given)
    budget = stop(model, times)
    if budget["exceeds"]:
        raise ValueError(
            f"resources.train.slurm_extra: the time-limit warning comes {budget['warning']:.1f} min before the limit, "
            f"but a stop may take up to {budget['total'][1]:.1f} min (drain {budget['drain'][1]:.1f} + save "
            f"{budget['save'][1]:.1f}: {budget['gigabytes']:,.0f} GB at {times['save_gb_per_s'][0]:.2f} GB/s); the "
            f"job would be killed before its save ends. Ask for --signal=URG@{budget['lead_seconds']}, or measure "
            "the step and the save (--timings drain_minutes, save_gb_per_s)")
    train, evaluate = rule_resources(model.raw, "train"), rule_resources(model.raw, "evaluate")
    checkpoints = model.steps // model.eval_every
    runtime = train.get("runtime")
    usable = runtime - (budget["warning"] or 0) if runtime else None  # a job stops at its warning
    tuning_runs = model.tuning.runs() if model.tuning else []

    def train_minutes(step: float, save: float, startup: float, load: float) -> tuple[float, int]:
        """A run's minutes on its node (steps, periodic saves, each attempt's start, each resume's load
        of its Megatron save) and its time-limit stops."""
        working = model.steps * step + checkpoints * save
        stops = math.ceil((working + startup) / usable) - 1 if runtime else 0
        return working + (stops + 1) * startup + stops * load, stops

    def run_minutes(step: int, save: int, startup: int) -> tuple[float, int]:  # 0: an input's low end, 1: high
        return train_minutes(times["step"][step], budget["save"][save], times["startup"][startup],
                             budget["megatron_save"][save])

    ends = [run_minutes(i, i, i) for i in (0, 1)]
    swings = {name: (run_minutes(*ends_of)[0] - ends[0][0]) * train["gpu"] / 60 for name, ends_of in (
        ("minutes per step", (1, 0, 0)), ("save speed", (0, 1, 0)), ("start-up", (0, 0, 1)))}
    jobs, replay, params = [], replays(model), model.engine_params
    for recipe, lag, seed in [*model.grid_runs, *tuning_runs]:
        store = [footprint.object_store(params, replay=replay[recipe], lag=lag, response_tokens=tokens,
                                        mem_mb=train.get("mem_mb"))
                 for tokens in (footprint.MID_RUN_RESPONSE_TOKENS, params["rollout_max_response_len"])]
        jobs.append({
            "recipe": recipe, "lag": lag, "seed": seed,
            "object_store_gb": [entry["need"] / 1e9 for entry in store], "spill_gb": [e["spill"] / 1e9 for e in store],
            "train_gpu_hours": [m / 60 * train["gpu"] for m, _ in ends],
            "eval_gpu_hours": [checkpoints * m / 60 * evaluate["gpu"] for m in times["checkpoint"]],
            "stops": [stops for _, stops in ends],
        })
    total = {key: [sum(job[key][i] for job in jobs) for i in (0, 1)] for key in ("train_gpu_hours", "eval_gpu_hours")}
    runs = [(job["recipe"], job["lag"], job["seed"]) for job in jobs]
    return {"jobs": jobs, "swings": {name: swing * len(jobs) for name, swing in swings.items()},
            "footprint": grid_footprint(model, runs), "tuning_jobs": len(tuning_runs), "total": total,
            "timings": times, "stop": budget, "checkpoints": checkpoints, "runtime": runtime,
            "retries": train_retries(dict(model.raw)), "train_gpus": train["gpu"], "eval_gpus": evaluate["gpu"]}


def footprint_lines(f: dict) -> list[str]:
    run, tb = f["run"], footprint.TB
    recipe, lag = f["memory_job"]
    return [
        f"  disk per run (estimate, engines/slime/footprint.py): peak {run['peak'] / tb:.2f} TB ({run['saves']} HF "
        f"saves x {run['hf_save'] / 1e9:,.0f} GB, all kept until evaluated, + {min(run['keep'] + 1, run['saves'])} "
        f"Megatron saves x {run['megatron_save'] / 1e9:,.0f} GB), {run['kept'] / tb:.2f} TB kept when it ends, "
        f"{run['written'] / tb:.1f} TB written",
        f"  disk per grid (estimate): peak {f['grid_peak'] / tb:,.0f} TB (the last {f['at_once']} jobs at once at "
        f"their peak, {f['at_once_source']}, the other runs ended and kept), {f['grid_kept'] / tb:,.0f} TB kept when "
        f"all end, {f['grid_written'] / 1e15:.2f} PB written; {f['free'] / tb:,.2f} TB free here ({f['free_source']}), "
        + (f"which holds the grid at up to {f['fits']} jobs at once (the profile's jobs; each job's pre-flight "
           "counts the grid's runs under way)" if f["fits"] is not None else
           "which cannot hold the runs' kept saves at any number of jobs at once: free space or raise the quota"),
        f"  host memory per training job (estimate, the largest: {recipe} at lag {lag}): "
        f"{footprint.describe_memory(f['memory'])}; {footprint.describe_memory(f['memory_cap'])}, the response cap; "
        + (f"resources.train.mem_mb {f['mem_mb']:,} MB" if f["mem_mb"] else "no resources.train.mem_mb"),
        f"  Ray's object store of that job (estimate, engines/slime/footprint.py): "
        f"{footprint.describe_object_store(f['object_store'][0])}; {footprint.describe_object_store(f['object_store'][1])}"
        f", the response cap; {f['at_once']} jobs at once spill up to {f['at_once'] * f['object_store'][1]['spill'] / 1e12:.1f} "
        "TB, each on its own node's disk (engine_params.ray_temp_dir, checked by each job's pre-flight)"]


def report(model: Config, given: dict | None = None) -> str:
    p = plan(model, given)
    t = p["timings"]

    def span(pair, digits=0):
        return f"{pair[0]:,.{digits}f}-{pair[1]:,.{digits}f}"

    budget = p["stop"]
    tuning = (f" ({p['tuning_jobs']} of them tuning runs, on the tuning seeds: config tuning)"
              if p["tuning_jobs"] else "")
    lines = [f"plan: {len(p['jobs'])} training jobs{tuning} x {model.steps} steps on {p['train_gpus']} GPUs, "
             f"{p['checkpoints']} checkpoints each scored on {p['eval_gpus']} GPUs",
             f"  minutes per step {span(t['step'], 1)} ({t['step_source']})",
             f"  minutes per checkpoint {span(t['checkpoint'], 1)} at concurrency {t['concurrency']}, k = "
             f"{model.eval.k} ({t['checkpoint_source']})",
             f"  train runtime {p['runtime']} min: retries {p['retries']} (grid.jobs.train_retries)",
             f"  per run on top of its steps: {p['checkpoints']} periodic saves of {span(budget['save'], 1)} min each "
             f"(Megatron + HF, the trainer waits), {span(t['startup'], 1)} min of start-up per attempt "
             f"({t['startup_source']}), and a resumed attempt's read of its Megatron save "
             f"{span(budget['megatron_save'], 1)} min; no rework: the warning's lead covers a stop",
             f"  time-limit stop {span(budget['total'], 1)} min against a "
             + (f"{budget['warning']:.1f}-min warning" if budget["warning"] else "train job with no warning")
             + f": drain {span(budget['drain'], 1)} ({t['drain_source']}) + data-source save 0 (made after each "
             f"generation) + a periodic save {span(budget['save'], 1)} ({budget['gigabytes']:,.0f} GB: "
             f"{budget['parameters'] / 1e9:.2f}B parameters, Megatron with optimizer + HF; a stop off the "
             f"evaluation cadence writes the Megatron {budget['megatron_gigabytes']:,.0f} GB only, "
             f"{span(budget['megatron_save'], 1)} min; at {span(t['save_gb_per_s'], 2)} GB/s, {t['save_source']})",
             *footprint_lines(p["footprint"]),
             "recipe lag seed | train GPU-h | eval GPU-h | time-limit stops | Ray object store GB | spilled GB "
             f"(mid-run to the response cap; to {model.engine_params['ray_temp_dir']} on the node)"]
    lines += [f"{job['recipe']} {job['lag']} {job['seed']} | {span(job['train_gpu_hours'])} | "
              f"{span(job['eval_gpu_hours'])} | {job['stops'][0]}-{job['stops'][1]} | "
              f"{span(job['object_store_gb'])} | {span(job['spill_gb'])}" for job in p["jobs"]]
    total = [a + b for a, b in zip(p["total"]["train_gpu_hours"], p["total"]["eval_gpu_hours"])]
    lines.append(f"grid: training {span(p['total']['train_gpu_hours'])} GPU-h + evaluation "
                 f"{span(p['total']['eval_gpu_hours'])} GPU-h = {span(total)} GPU-h")
    swings = sorted(p["swings"].items(), key=lambda item: -item[1])
    lines.append(f"  the training range is dominated by {swings[0][0]}: each input alone from its low to its high "
                 "end adds " + ", ".join(f"{name} {swing:,.0f} GPU-h" for name, swing in swings))
    return "\n".join(lines)
