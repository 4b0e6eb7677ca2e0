"""benchmarks/gpu_check.py on a CPU-only machine, with only torch, numpy, pyyaml and safetensors
importable besides the repository (what the GPU machine it is meant for has)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from stabilizers import available

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("snakemake", "lm_eval", "mlflow", "scipy", "matplotlib", "jsonschema", "math_verify", "hypothesis",
           "pytest", "slime", "megatron", "tqdm")
RUN_WITHOUT = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
sys.argv = ["gpu_check.py", "--tokens", "4096", "--json", {out!r}]
runpy.run_path("benchmarks/gpu_check.py", run_name="__main__")
"""


def test_cpu_path_runs_with_torch_only(tmp_path):
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(blocked=BLOCKED, out=str(out))], cwd=ROOT,
                            check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "CUDA not available: CPU columns only, CUDA columns skipped" in result.stdout
    assert "slime loss entry skipped" not in result.stdout
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows if r["kind"] == "stabilizer"] == available()
    slime = {r["name"] for r in rows if r["kind"] == "slime loss"}
    assert {"grpo", "sat_gspo_r3", "gspo_tis", "dppo"} <= slime
    assert all(math.isfinite(r["loss_cpu"]) and set(r) == {"kind", "name", "loss_cpu"} for r in rows)
