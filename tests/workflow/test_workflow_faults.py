"""The workflow under faults, by real Snakemake on a one-run grid of the tiny engine: a full disk
(a 3 MB tmpfs: the grid fails naming the disk error, leaves no half-written file, and completes
once space is freed) and SIGINT / SIGTERM to the workflow's process group (during training, then
during evaluation: the grid is left resumable and completes). Each ends with the numbers of the
same grid run without a fault (metrics but their time stamps, scores, checkpoints, bit for bit).

The full-disk test mounts a tmpfs (root); outside CI it skips naming that, in CI (.ci/run) it is
required (tests/support/optional.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.io import read_jsonl
from tests.support.optional import missing
from tests.support.untimed import untimed_rows
from tests.support.waiting import wait_until
from tests.support.workflow_cli import ROOT, SNAKEMAKE

# grids run by Snakemake: a reference, then each fault and its recovery (~6 min each on a loaded 2-core box)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]

OVERRIDES = {"grid": "faults", "recipes": ["grpo"], "baseline": "grpo", "lags": [1], "seeds": [0], "claims": [],
             "steps": 4, "eval_every": 2, "engine_params": {"preset": "demo", "warmstart_steps": 10},
             "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}}}
RUN = Path("faults/runs/grpo/lag1/seed0")  # the grid's one run, under results_dir
FULL_DISK = "3m"  # holds the base model and a checkpoint, not the resume state after it (tiny engine)


def command(results: Path, workdir: Path, *args: str) -> list[str]:
    """The checkout's Snakefile on ``results``, its .snakemake/ state in ``workdir``."""
    return [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "-c2", *args,
            "-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in OVERRIDES.items())]


def environment() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def snakemake(results: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(results, workdir, *args), cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, env=environment())


def completed(results: Path, workdir: Path, *args: str) -> None:
    done = snakemake(results, workdir, *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def outcome(results: Path) -> dict:
    """What a grid run computed: the run's metrics (without time stamps), scores, status and
    checkpoint bytes, and the grid's summary numbers."""
    run = results / RUN
    summary = json.loads((results / "faults" / "summary.json").read_text())
    return {"metrics": untimed_rows(run / "train" / "metrics.jsonl"),
            "scores": read_jsonl(run / "eval" / "tiny_test.jsonl"),
            "status": {k: v for k, v in json.loads((run / "train" / "status.json").read_text()).items()
                       if k != "seconds"},
            "checkpoints": {str(path.relative_to(run)): path.read_bytes()
                            for path in sorted((run / "train" / "checkpoints").rglob("*")) if path.is_file()},
            "cells": [cell["per_seed"] for cell in summary["cells"]]}


def no_half_written_file(results: Path) -> None:
    """Every JSON file parses, every JSON-lines file too (read_jsonl names a cut line), and no
    temp file of an atomic write is left."""
    for path in results.rglob("*"):
        if path.name.endswith(".tmp") and path.is_file():
            raise AssertionError(f"a temp file was left: {path}")
        if path.suffix == ".json" and path.is_file() and path.stat().st_size:
            json.loads(path.read_text())
        if path.suffix == ".jsonl":
            read_jsonl(path)


@pytest.fixture(scope="module")
def uninterrupted():
    """The grid run once without a fault: what every faulted run must end with."""
    with tempfile.TemporaryDirectory(prefix="stalebench-faults-") as folder:
        results = Path(folder) / "results"
        completed(results, Path(folder) / "state")
        yield outcome(results)


@pytest.fixture
def tmpfs(scratch):
    """A mounted tmpfs of FULL_DISK bytes (unmounted after the test); skipped where mounting is not allowed."""
    mount = scratch / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        missing("tmpfs", f"a full disk needs a {FULL_DISK} tmpfs mounted (root, CAP_SYS_ADMIN): "
                         f"mount said {made.stderr.strip()!r}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_fails_cleanly_and_the_grid_completes_once_space_is_freed(uninterrupted, tmpfs, scratch):
    results, state = tmpfs / "results", scratch / "state"
    full = snakemake(results, state)
    printed = full.stdout + full.stderr
    assert full.returncode != 0
    logs = "".join(path.read_text(errors="replace") for path in (results / "faults" / "logs").rglob("*.log"))
    assert "No space left on device" in printed + logs, printed[-3000:]
    no_half_written_file(results)
    # space freed: the same disk, grown (a tmpfs resizes in place; every file stays where it was)
    subprocess.run(["mount", "-o", "remount,size=64m", str(tmpfs)], check=True)
    completed(results, state)
    no_half_written_file(results)
    assert outcome(results) == uninterrupted


def interrupt(results: Path, workdir: Path, sign: signal.Signals, ready, what: str) -> None:
    """Run the workflow in its own process group and send ``sign`` to the group (as a terminal's
    Ctrl-C, or a batch system's stop, reaches every process of it) once ``ready()`` holds."""
    # SIGINT as a terminal delivers it: a suite started in the background of a shell without job control
    # inherits SIGINT ignored (POSIX), and so would the workflow, which then ran to its end unstopped
    process = subprocess.Popen(command(results, workdir, "--rerun-incomplete"), cwd=ROOT, env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_until(ready, what, process)
        os.killpg(process.pid, sign)
        printed, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode != 0, printed[-3000:]


def test_sigint_in_training_then_sigterm_in_evaluation_leave_a_grid_that_completes(uninterrupted, scratch):
    results, state = scratch / "results with spaces", scratch / "state"
    run = results / RUN
    interrupt(results, state, signal.SIGINT, lambda: (run / "train" / "checkpoints" / "step_2").is_dir(),
              "the first checkpoint")
    no_half_written_file(results)
    assert not (run / "train" / "status.json").exists()  # stopped inside training
    scores = run / "eval" / ".tiny_test.scores.jsonl"
    interrupt(results, state, signal.SIGTERM, lambda: scores.is_file() and scores.stat().st_size > 0,
              "the first score")
    no_half_written_file(results)
    assert (run / "train" / "status.json").exists()
    completed(results, state, "--rerun-incomplete")  # what the local profile passes (workflow/profiles/local)
    no_half_written_file(results)
    assert outcome(results) == uninterrupted
