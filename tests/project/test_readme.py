"""The README is a test (issue 64): every fenced shell command and Python block of README.md runs, in the
README's order, as a newcomer would type it, in a copy of the checkout with no results folder (the venv
reused). A Python block that opens with a file's name (``# stabilizers/my_clip.py``) is that file, written
where it says; another runs in the venv's Python. A README edit that breaks a command fails here.

The one override, so that the whole README fits CI: SHRINK, written into the copy's config.yaml (the demo
grid at a few steps and two seeds, a fixed design, a short warm start and eval); every command runs as
printed. `make setup` runs as `make -q setup`: the venv is the checkout's, and must be up to date."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.workflow_cli import copy_checkout

SHRINK = {"steps": 6, "eval_every": 2, "seeds": [0, 1], "seeding": None,
          "engine_params": {"preset": "stress", "warmstart_steps": 10},
          "eval": {"problems": {"tiny_test": 16}}}
BLOCK = re.compile(r"^```(bash|sh|python)\n(.*?)^```", re.M | re.S)


def readme_steps(text: str) -> list[tuple[str, str]]:
    """("shell", a command line) or ("file", its path and text) or ("python", code), in the README's order."""
    steps = []
    for language, body in BLOCK.findall(text):
        if language == "python":
            named = re.match(r"# ([\w/]+\.py)\n", body)
            steps.append(("file", body) if named else ("python", body))
        else:
            steps += [("shell", line) for line in body.splitlines() if line.split("#", 1)[0].strip()]
    return steps


def shrunk(config: dict) -> dict:
    merged = {**config, **SHRINK, "eval": {**config["eval"], **SHRINK["eval"]}}
    return merged


def run_step(kind: str, body: str, code: Path, env: dict) -> str:
    """Run one step in ``code``; returns what it printed (a failure fails the test, naming the step)."""
    if kind == "file":
        path = code / re.match(r"# ([\w/]+\.py)\n", body).group(1)
        path.write_text(body)
        return ""
    if kind == "python":
        command = [str(code / ".venv" / "bin" / "python"), "-c", body]
    else:
        line = re.sub(r"^make setup\b", "make -q setup", body)
        command = ["bash", "-euo", "pipefail", "-c", line]
    done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True, timeout=1500)
    said = done.stdout + done.stderr
    assert done.returncode == 0, f"README step failed ({kind}): {body}\n{said[-4000:]}"
    return said


def test_the_readmes_steps_are_its_fenced_blocks_in_order():
    steps = readme_steps((ROOT / "README.md").read_text())
    shell = [body for kind, body in steps if kind == "shell"]
    assert shell[0].startswith("make setup") and any(" run " in line for line in shell), shell
    assert [kind for kind, _ in steps].count("file") == 1  # the stabilizer example, then the run that uses it
    assert all(re.match(r"(make|\.venv/bin/stalebench) ", line) for line in shell), shell  # one command for people


@pytest.mark.slow  # the README's grids, shrunk: a few minutes on 2 cores
@pytest.mark.timeout(3000)
def test_the_readme_runs_in_its_order(tmp_path):
    code = copy_checkout(tmp_path / "code")
    (code / ".venv").symlink_to(ROOT / ".venv")
    config = code / "config.yaml"
    config.write_text(yaml.safe_dump(shrunk(yaml.safe_load(config.read_text())), sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(code)}  # the copy's code, the stabilizer written into it included
    results, said = code / "results", []
    for kind, body in readme_steps((ROOT / "README.md").read_text()):
        before = sorted(results.rglob("*"))
        said.append(run_step(kind, body, code, env))
        if re.search(r" (-n|--dry-run)\b", body):
            assert sorted(results.rglob("*")) == before, f"a dry run wrote: {body}"
    assert (results / "demo" / "table.md").is_file() and (results / "demo" / "mlflow.json").is_file()
    assert not (results / "demo_rerun").exists(), "the rerun's --dry-run wrote"
    mine = json.loads((results / "mine" / "summary.json").read_text())
    statuses = [status for cell in mine["cells"] if cell["recipe"] == "my_recipe" for status in cell["per_seed"]["status"]]
    assert statuses and set(statuses) == {"completed"}, statuses  # trained, evaluated, aggregated
    assert (results / "mine" / "mlflow.json").is_file()  # and tracked
    assert any("stalebench: the table: " in text for text in said)


CALL = """import torch
from stabilizers.api import PolicyBatch, get
logp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
ones = torch.ones(2, 3, dtype=torch.float64)
batch = PolicyBatch(logp=logp, old_logp=logp.detach() - 0.1, rollout_logp=logp.detach() - 0.2, advantages=ones,
                    mask=ones)
get("my_clip")(batch).loss.backward()
print("gradient", logp.grad.abs().sum().item())
"""


def stabilizer_call(tmp_path: Path, example: str) -> subprocess.CompletedProcess:
    """The README's stabilizer example written into a copy of stabilizers/ and called on a batch."""
    package = tmp_path / "stabilizers"
    shutil.copytree(ROOT / "stabilizers", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "my_clip.py").write_text(example)
    return subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", CALL], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path)})


@pytest.mark.slow  # two Python processes importing torch and the registry
def test_the_stabilizer_example_runs_and_the_old_one_fails(tmp_path):
    """The quick form of the slow test's stabilizer step: the README's block computes a loss with a gradient;
    the block it replaced (``clip_bounds(..., ratio.dtype)``, before clip_bounds took a tensor) fails."""
    example = next(body for kind, body in readme_steps((ROOT / "README.md").read_text()) if kind == "file")
    works = stabilizer_call(tmp_path / "now", example)
    assert works.returncode == 0 and "gradient" in works.stdout, works.stderr[-3000:]
    old = stabilizer_call(tmp_path / "before", example.replace("clip_bounds(eps, eps, ratio)",
                                                               "clip_bounds(eps, eps, ratio.dtype)"))
    assert old.returncode != 0 and "'torch.dtype' object has no attribute 'dtype'" in old.stderr, old.stderr[-3000:]
