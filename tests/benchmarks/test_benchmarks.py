"""Every script in benchmarks/ runs, with its smallest arguments, from a checkout: a benchmark that no
longer starts (a config check it fails, a renamed module) fails here, not the day someone needs its
figure. The figures themselves are the scripts' business (benchmarks/README.md); this checks that each
ends with exit status 0 and prints what it measures. Slow (minutes in all): marker `slow`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.optional import missing
from tests.support.paths import ROOT

PYTHON = sys.executable

# script -> (its smallest arguments, a line its output must contain); {tmp} is a fresh folder
SMALLEST = {
    "bench_coverage": (["--trials", "20", "--bootstrap-trials", "0", "--n", "3", "--contrast-trials", "20",
                        "--survival-trials", "20"], "coverage"),
    "bench_demo_cost": (["--dir", "{tmp}/demo", "--levels", "native", "--set", "steps=4", "eval_every=2",
                         "recipes=[grpo]", "lags=[1]", "seeds=[0]", "seeding=null", "claims=[]", "baseline=grpo"],
                        "96 runs (most)"),
    "bench_dryrun": (["--repeats", "1", "--seeds", "1"], "snakemake -n -q: 20-run grid"),
    "bench_eval_concurrency": (["--latency", "0.05", "--concurrency", "1", "4"], "most in flight"),
    "bench_eval_score": (["--checkpoints", "1", "--problems", "4", "--k", "1"], " s"),
    "bench_kernels": (["--repeats", "2"], "grouped_mm"),
    "bench_queue_lag": (["--steps", "4", "--out", "{tmp}/queue"], "{"),
    "bench_rollout_mismatch": (["--run", "{run}", "--rollouts", "2"], "bfloat16"),
    "bench_run_phases": (["--steps", "4", "--out", "{tmp}/phases"], "CPU s"),
    "bench_step": (["--steps", "3", "--warmup", "1", "--repeats", "1", "--out", "{tmp}/step"], "floor"),
    "bench_verdicts": (["--replicates", "200"], "P(two runs agree)"),
    "bench_replication": (["--runs", "1", "--wide-runs", "1", "--truth-reruns", "400", "--collapse-runs", "1",
                           "--paths", "20000", "--write", "{tmp}/replication"], "joint miss"),
    "bench_replication_cause": (["--runs", "1", "--truth-reruns", "400", "--write", "{tmp}/cause"], "spread known"),
    "compare_runs": (["{run}", "{run}"], "identical"),
    "same_bits": (["--before", ".", "--cases", "r2_top2_bf16", "--steps", "2", "--out", "{tmp}/bits"], "identical"),
    "mutants": (["--only", "digest_ignores_metrics"], "1 of 1 mutants killed"),
    "bench_run_cpu": (["--recipes", "grpo", "--lags", "1", "--seeds", "0"], "train"),
    "bench_setup": (["--ref", "HEAD", "--dir", "{tmp}/clone"], "wall"),
    "bench_stabilizers": (["--tokens", "1000", "--repeats", "1", "--recipes", "grpo", "sat_grpo", "--no-compile"],
                          "sat_grpo"),
    "bench_tiny": (["--steps", "4", "--eval-every", "2", "--out", "{tmp}/tiny"], "s"),
    "bench_ui_memory": (["--seconds", "2"], "RSS"),
    "bench_workflow_scale": (["--runs", "20", "--steps", "10", "--eval-every", "5"], "runs"),
    "gpu_check": (["--tokens", "256", "--repeats", "1"], "grpo"),
    "ui_screenshot": (["--out", "{tmp}/ui"], "page"),
}
CHROMIUM = "/usr/bin/chromium"


def test_every_benchmark_script_has_its_smallest_arguments():
    """A script runs as ``__main__``; a module the scripts share (replication_truths) does not."""
    scripts = [path.stem for path in (ROOT / "benchmarks").glob("*.py") if '__name__ == "__main__"' in path.read_text()]
    assert sorted(SMALLEST) == sorted(scripts) and "bench_replication" in scripts


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A short tiny-engine run (benchmarks.bench_run_phases'), for the scripts that read one."""
    out = tmp_path_factory.mktemp("run")
    subprocess.run([PYTHON, "-m", "benchmarks.bench_run_phases", "--steps", "4", "--out", str(out)], cwd=ROOT,
                   check=True, capture_output=True, timeout=900)
    return next(out.glob("**/runs/*/lag*/seed*"))


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_the_benchmark_runs_with_its_smallest_arguments(script, tmp_path, request):
    if script == "ui_screenshot" and not Path(CHROMIUM).exists() and shutil.which("apt-get") is None:
        missing("browser", f"{script} needs Debian's chromium at {CHROMIUM} (or apt-get to install it)")
    arguments, expected = SMALLEST[script]
    run = request.getfixturevalue("finished_run") if "{run}" in arguments else None
    command = [PYTHON, "-m", f"benchmarks.{script}", *(a.format(tmp=tmp_path, run=run) for a in arguments)]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output[-3000:]}"
    assert expected in result.stdout, f"{' '.join(command)} printed:\n{result.stdout[-3000:]}"
