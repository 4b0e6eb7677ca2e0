"""What a slime run writes and keeps on disk, and what one training job holds in host memory: ESTIMATES
from the model's parameter count and the run's settings, for ``--plan`` (engines.slime.plan) and the
pre-flight (engines.slime.preflight), which refuses a job the file system or its memory cannot hold.

Disk, per run (bytes per parameter as engines.slime.plan's stop budget counts them):
- an HF save (2 B a parameter, bf16) every ``eval_every`` steps, all kept until the evaluation;
- a Megatron save (2 B of bf16 weights, + 12 B of fp32 master weights and Adam moments with
  ``save_optimizer``) at the same steps (``--save-interval``); the newest ``keep_megatron_checkpoints``
  are kept (engines.slime.retention), plus the one being written before the oldest is pruned.
- written: every save; a time-limit stop's Megatron save comes on top.

Host memory of one training job, by its terms:
- CPU Adam (``optimizer_cpu_offload``): 16 B a parameter, the fp32 master weights, two moments and the
  fp32 gradients copied to the host (--overlap-cpu-optimizer-d2h-h2d);
- slime's weight backups (weights_backuper): a bf16 copy of the actor's weights on the host, and of
  the KL reference's when the KL loss is on;
- R3's routed experts: int32 [tokens, layers, top-k] per rollout (SGLang returns them with every
  sample), held by every trainer rank twice (the rollout data and the replay buffer), by the rollout
  manager once, and by Ray's object store once per rollout held at once (up to lag + 1: the one
  trained and those generated ahead of it). Tokens: the step's samples x a response length, at the
  response cap and at MID_RUN_RESPONSE_TOKENS (prompts not counted).
SGLang's and Ray's own processes come on top of all of it.

Ray's object store, per job: the rollouts it holds at once (object_store), the part beyond its size
spilled to ``ray_temp_dir`` on the node (check_spill).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engines.slime.params import model_shape, parameter_counts

WEIGHT_BYTES, OPTIMIZER_BYTES, HF_BYTES = 2, 12, 2
CPU_ADAM_BYTES = 16
BACKUP_BYTES = 2
EXPERT_ID_BYTES = 4  # int32
# The mean response length mid-run: docs/cluster.md "Cost" (~5k tokens, an estimate); responses
# lengthen as RL trains, so the memory at the response cap is printed too.
MID_RUN_RESPONSE_TOKENS = 5_000
TB = 1e12
# Ray's object store: by default 30% of the memory Ray sees, at most 200 GB (ray._private.ray_constants:
# DEFAULT_OBJECT_STORE_MEMORY_PROPORTION, DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES); what does not fit is
# spilled to files under Ray's temp dir (object spilling's default), the job script's --temp-dir:
# engine_params.ray_temp_dir, a node-local path the pre-flight checks.
RAY_STORE_FRACTION, RAY_STORE_CAP = 0.3, 200e9


def disk(params: dict, steps: int, eval_every: int) -> dict:
    """Bytes of one run: each save, what it keeps at its peak and at its end, and what it writes."""
    parameters = sum(parameter_counts(model_shape(params["model_type"])))
    hf = parameters * HF_BYTES
    megatron = parameters * (WEIGHT_BYTES + (OPTIMIZER_BYTES if params["save_optimizer"] else 0))
    saves, keep = steps // eval_every, params["keep_megatron_checkpoints"]
    return {"hf_save": hf, "megatron_save": megatron, "saves": saves, "keep": keep,
            "peak": saves * hf + min(keep + 1, saves) * megatron, "kept": saves * hf + min(keep, saves) * megatron,
            "written": saves * (hf + megatron)}


def host_memory(params: dict, *, replay: str | None, lag: int, response_tokens: int) -> dict:
    """Bytes of host memory of one training job, by term, at ``response_tokens`` per response."""
    shape = model_shape(params["model_type"])
    parameters = sum(parameter_counts(shape))
    copies = 2 * params["actor_gpus"] + 1 + (lag + 1)
    tokens = params["rollout_batch_size"] * params["n_samples_per_prompt"] * response_tokens
    per_copy = tokens * shape["num_layers"] * shape["moe_router_topk"] * EXPERT_ID_BYTES if replay == "r3" else 0
    terms = {"optimizer": parameters * CPU_ADAM_BYTES if params["optimizer_cpu_offload"] else 0,
             "backups": parameters * BACKUP_BYTES * (2 if params["kl_loss_coef"] else 1),
             "r3": per_copy * copies}
    return {**terms, "total": sum(terms.values()), "r3_copies": copies if replay == "r3" else 0,
            "r3_per_rollout": per_copy, "response_tokens": response_tokens}


def ray_object_store_bytes(mem_mb: int | None) -> float:
    """The object store Ray's head starts with: RAY_STORE_FRACTION of the memory Ray sees (a SLURM job's
    cgroup limit: its mem_mb), at most RAY_STORE_CAP."""
    return min(RAY_STORE_CAP, RAY_STORE_FRACTION * mem_mb * 1e6) if mem_mb else RAY_STORE_CAP


def object_store(params: dict, *, replay: str | None, lag: int, response_tokens: int, mem_mb: int | None) -> dict:
    """Bytes of one job's rollouts in Ray's object store at once (R3's routed experts of up to lag + 1
    rollouts: the one trained and those generated ahead of it; token ids, log-probs and rewards are small
    beside them and not counted), the store's size, and what spills to files under ``ray_temp_dir``."""
    need = host_memory(params, replay=replay, lag=lag, response_tokens=response_tokens)["r3_per_rollout"] * (lag + 1)
    store = ray_object_store_bytes(mem_mb)
    return {"need": need, "store": store, "spill": max(need - store, 0.0), "path": params["ray_temp_dir"],
            "response_tokens": response_tokens}


def describe_object_store(entry: dict) -> str:
    return (f"{entry['need'] / 1e9:,.0f} GB at {entry['response_tokens']:,}-token responses in a "
            f"{entry['store'] / 1e9:,.0f} GB store: {entry['spill'] / 1e9:,.0f} GB spilled to {entry['path']}")


def describe_memory(memory: dict) -> str:
    r3 = (f" + R3 routed experts {memory['r3'] / 1e9:,.0f} GB ({memory['r3_copies']} copies)"
          if memory["r3"] else "")
    return (f"{memory['total'] / 1e9:,.0f} GB at {memory['response_tokens']:,}-token responses: CPU Adam "
            f"{memory['optimizer'] / 1e9:,.0f} GB + weight backups {memory['backups'] / 1e9:,.0f} GB{r3}")


def check_host_memory(params: dict, *, replay: str | None, lag: int, mem_mb: int | None) -> str:
    """The job's memory (resources.train.mem_mb; SLURM_MEM_PER_NODE inside the job) must hold the
    mid-run estimate; the one at the response cap is reported."""
    mid = host_memory(params, replay=replay, lag=lag, response_tokens=MID_RUN_RESPONSE_TOKENS)
    cap = host_memory(params, replay=replay, lag=lag, response_tokens=params["rollout_max_response_len"])
    line = (f"host memory per training job (estimate): {describe_memory(mid)}; "
            f"{cap['total'] / 1e9:,.0f} GB at the response cap")
    if mem_mb is None:
        return line + " (no mem_mb to compare with here)"
    if mid["total"] > mem_mb * 1e6:
        raise ValueError(f"resources.train.mem_mb = {mem_mb:,} MB cannot hold the {line}: the job would be "
                         "killed for memory once its responses reach that length; ask for more memory "
                         "(resources.train.mem_mb), or train R3 at a smaller lag or batch")
    return f"{line}, within mem_mb {mem_mb:,} MB"


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def lustre_quota_free(path: Path) -> int | None:
    """Bytes left under the user's Lustre quota of ``path``'s file system (``lfs quota -q -u``), None
    where there is no ``lfs`` or no limit."""
    if not shutil.which("lfs"):
        return None
    result = subprocess.run(["lfs", "quota", "-q", "-u", str(os.getuid()), str(path)], capture_output=True,
                            text=True, timeout=60)
    # the file system's path (alone on a line when it is long), then kbytes used, quota, limit, grace,
    # files, ...; a '*' marks a value over its quota
    numbers = [int(word.rstrip("*")) for word in result.stdout.split()
               if not word.startswith("/") and word.rstrip("*").isdigit()]
    if result.returncode or len(numbers) < 3 or not any(numbers[1:3]):
        return None
    used, soft, hard = numbers[:3]
    return (min(q for q in (soft, hard) if q) - used) * 1024


def free_bytes(path: Path) -> tuple[int, str]:
    """The bytes that can still be written under ``path`` and where that figure comes from."""
    here = _existing(Path(path))
    free, source = shutil.disk_usage(here).free, f"df {here}"
    quota = lustre_quota_free(here)
    if quota is not None and quota < free:
        free, source = quota, f"lfs quota {here}"
    return free, source


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if Path(path).is_dir() else 0


def check_disk(params: dict, *, steps: int, eval_every: int, train_dirs: list[Path] | None) -> str:
    """The peak on disk of the runs writing to one file system, less what their train folders hold already,
    must fit in its free space. ``train_dirs``: this run's train folder first, then those of the grid's other
    runs under way (jobs that start together all see the same free space: each must count the others);
    None: the estimate only."""
    need = disk(params, steps, eval_every)
    line = (f"disk per run (estimate): peak {need['peak'] / TB:.2f} TB ({need['saves']} HF saves x "
            f"{need['hf_save'] / 1e9:,.0f} GB kept for evaluation + {min(need['keep'] + 1, need['saves'])} Megatron "
            f"saves x {need['megatron_save'] / 1e9:,.0f} GB), {need['written'] / TB:.1f} TB written")
    if train_dirs is None:
        return line
    remaining = sum(max(need["peak"] - folder_bytes(folder), 0) for folder in train_dirs)
    free, source = free_bytes(train_dirs[0])
    line += (f"; {remaining / TB:.2f} TB still to come for {len(train_dirs)} run(s) under way on this file system "
             f"against {free / TB:.2f} TB free ({source})")
    if remaining > free:
        raise ValueError(f"{line}: the file system of {train_dirs[0]} cannot hold the runs; every job on it would "
                         "fail at its next save. Free space, raise the quota, run fewer jobs at once (the SLURM "
                         "profile's jobs), or set engine_params.keep_megatron_checkpoints lower")
    return line


def check_spill(params: dict, *, replay: str | None, lag: int, mem_mb: int | None, on_node: bool) -> str:
    """Ray's spill of this job at the response cap must fit in the free space of ``ray_temp_dir`` (the job
    script's ray --temp-dir) on the node (``on_node``; else the estimate only)."""
    entry = object_store(params, replay=replay, lag=lag, response_tokens=params["rollout_max_response_len"],
                         mem_mb=mem_mb)
    line = f"Ray's object store per job (estimate, at the response cap): {describe_object_store(entry)}"
    if not on_node:
        return line
    free, source = free_bytes(Path(params["ray_temp_dir"]))
    line += f"; {free / TB:.2f} TB free there ({source})"
    if entry["spill"] > free:
        raise ValueError(f"{line}: Ray would fill the node's disk and fail the job; point engine_params.ray_temp_dir "
                         "at a node-local disk with room, or train R3 at a smaller lag or batch")
    return line
