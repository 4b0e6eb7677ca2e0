"""What a run ran on, recorded (not hashed) in run_dir/provenance.json beside its config.json.

The run key says *what* was run; this file says *with what*, so that two machines' different
numbers for one key can be explained. A run resumed after a kill may finish elsewhere, so the
file holds one entry per attempt (engines.train), oldest first:

    {"attempts": [{
        "started", "finished"        UTC ISO 8601 times; finished is null while running or after a kill
        "status"                     the engine's status at the end (completed | diverged | failed), or null
        "arithmetic_version"         the engine's arithmetic version (harness.engine.Engine.arithmetic_version;
                                     attempts recorded before it had this name hold it as "engine_version")
        "git_commit", "git_dirty"    the checkout's HEAD and whether tracked or new files differ from it
                                     (null, null outside a git checkout)
        "stalebench", "python", "torch", "lm_eval"   versions (null if not installed)
        "requirements_lock_sha256"   sha256 of requirements.lock, the pinned dependency set
        "host", "platform", "cpu_model"              socket host name, platform.platform(), /proc/cpuinfo model name
        "cpu_capability"             torch.backends.cpu.get_cpu_capability(): the SIMD kernels torch picked
                                     (e.g. AVX512: bf16 sampling numerics depend on it)
        "onednn_bf16"                whether oneDNN multiplies bf16 natively here (ONEDNN_MAX_CPU_ISA can lower it):
                                     with cpu_capability, what the tiny engine's version 2 rollout picks
        "cpu_flags"                  the numerics-relevant CPU flags present (avx2, avx512f, avx512_bf16, amx_bf16, ...)
        "torch_threads"              torch.get_num_threads() in the training process
        "cuda_devices"               names of visible CUDA devices ([] on CPU)
    }, ...]}

analysis.report.machines reads these files into the report.
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import platform
import socket
import subprocess
from pathlib import Path

from harness.run import RunDir

ROOT = Path(__file__).resolve().parents[1]
# Instruction-set flags that select different float kernels (and so can change low-order bits).
NUMERIC_CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16",
                     "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def git_commit() -> str | None:
    """The checkout's HEAD commit (None outside a git checkout): the one reader of it."""
    commit = _git("rev-parse", "HEAD")
    return commit.strip() if commit else None


def _cpuinfo() -> tuple[str | None, list[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None, []
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return fields.get("model name"), [flag for flag in NUMERIC_CPU_FLAGS if flag in flags]


def _torch_facts() -> dict:
    try:
        import torch
    except ImportError:
        return {"cpu_capability": None, "onednn_bf16": None, "torch_threads": None, "cuda_devices": []}
    cuda = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported(), "torch_threads": torch.get_num_threads(),
            "cuda_devices": cuda}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def collect() -> dict:
    """The facts of this process and machine (see the module docstring), without times."""
    commit = git_commit()
    status = _git("status", "--porcelain") if commit else None
    lock = ROOT / "requirements.lock"
    cpu_model, cpu_flags = _cpuinfo()
    return {
        "git_commit": commit,
        "git_dirty": bool(status.strip()) if status is not None else None,
        "stalebench": _version("stalebench"),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "lm_eval": _version("lm_eval"),
        "requirements_lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu_model,
        "cpu_flags": cpu_flags,
        **_torch_facts(),
    }


def start_attempt(run: RunDir, arithmetic_version: int = 1) -> None:
    """Append this attempt (started now, not finished) to the run's provenance.json; ``arithmetic_version``:
    the arithmetic the engine computes it with (harness.engine.Engine.arithmetic_version)."""
    record = run.read_provenance() or {"attempts": []}
    record["attempts"].append({"started": now(), "finished": None, "status": None,
                               "arithmetic_version": arithmetic_version, **collect()})
    run.write_provenance(record)


def finish_attempt(run: RunDir, status: str) -> None:
    """Mark the last attempt finished with ``status``, naming the sampled completions it left (the run folder's
    samples file, RunDir.samples_path: its rows and sha256), if the engine keeps any."""
    record = run.read_provenance()
    record["attempts"][-1].update(finished=now(), status=status)
    if run.samples_path.exists():
        data = run.samples_path.read_bytes()
        record["attempts"][-1]["samples"] = {"file": str(run.samples_path.relative_to(run.path)),
                                             "rows": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest()}
    run.write_provenance(record)
