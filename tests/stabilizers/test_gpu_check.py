"""benchmarks/gpu_check.py with only torch, numpy, pyyaml and safetensors importable besides the
repository (what the GPU machine it is meant for has): the CPU path on every machine (CUDA hidden),
the CUDA path where a GPU is present, and the verdict that fails a host sync."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu_check
from stabilizers import available
from tests.support.paths import ROOT

BLOCKED = ("snakemake", "lm_eval", "mlflow", "scipy", "matplotlib", "jsonschema", "math_verify", "hypothesis",
           "pytest", "slime", "megatron", "tqdm")
RUN_WITHOUT = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
if {hide_cuda!r}:  # the CPU path, whatever the machine has
    import torch
    torch.cuda.is_available = lambda: False
sys.argv = ["gpu_check.py", "--tokens", "4096", "--repeats", "2", "--json", {out!r}]
runpy.run_path("benchmarks/gpu_check.py", run_name="__main__")
"""
CUDA = torch.cuda.is_available()


@pytest.mark.slow  # a process importing torch
@pytest.mark.parametrize("hide_cuda", [True, pytest.param(False, marks=pytest.mark.gpu)] if CUDA else [True])
def test_the_check_runs_with_torch_only(tmp_path, hide_cuda):
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(blocked=BLOCKED, hide_cuda=hide_cuda,
                                                                       out=str(out))],
                            cwd=ROOT, check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "slime loss entry skipped" not in result.stdout
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows if r["kind"] == "stabilizer"] == available()
    slime = {r["name"] for r in rows if r["kind"] == "slime loss"}
    assert {"grpo", "sat_gspo_r3", "gspo_tis", "dppo"} <= slime
    assert all(math.isfinite(r["loss_cpu"]) for r in rows)
    if CUDA and not hide_cuda:
        assert "CUDA device: none" not in result.stdout
        assert all(r["verdict"] == "ok" and r["syncs"] == 0 and math.isfinite(r["ms"]) for r in rows), result.stdout
    else:
        assert "CUDA not available: CPU columns only, CUDA columns skipped" in result.stdout
        assert all(set(r) == {"kind", "name", "loss_cpu"} for r in rows)


@pytest.mark.parametrize("change, expected", [
    ({}, "ok"),
    ({"syncs": 1}, "SYNCS"),  # e.g. an .item() in a loss: every micro-batch of a cluster step waits
    ({"dloss": 1e-2}, "DIFFERS"),
    ({"dgrad": 1e-3, "syncs": 2}, "DIFFERS"),
])
def test_a_host_sync_fails_the_check(change, expected):
    row = {"loss_cpu": -0.5, "loss_cuda": -0.5, "dloss": 1e-7, "dgrad": 1e-8, "syncs": 0, "ms": 1.0, **change}
    assert gpu_check.verdict(row, grad_scale=1.0) == expected
    if CUDA:  # the counter itself sees a sync, at the line that made it
        _, sites = gpu_check.count_syncs(lambda: torch.ones(3, device="cuda").sum().item())
        assert sites and all(site.startswith("tests/stabilizers/test_gpu_check.py:") for site in sites), sites
