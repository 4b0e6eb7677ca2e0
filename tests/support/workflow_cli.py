"""Drive the real `snakemake` CLI of the project's environment from tests (its state outside the checkout)."""
from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.support.project_tree import _exempt, is_git_checkout

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
_JOB = re.compile(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    output: (.*)$", re.MULTILINE)


def session_workdir() -> Path:
    """This test session's Snakemake working folder, outside the checkout (created once, removed at exit)."""
    global _WORKDIR
    if _WORKDIR is None:
        _WORKDIR = Path(tempfile.mkdtemp(prefix="stalebench-snakemake-"))
        atexit.register(shutil.rmtree, _WORKDIR, ignore_errors=True)
    return _WORKDIR


_WORKDIR: Path | None = None


def snakemake(*args: str, timeout: float = 600, env: dict | None = None,
              workdir: Path | None = None) -> subprocess.CompletedProcess:
    """The checkout's Snakefile, run from the checkout (relative paths in ``args`` are the checkout's)
    with its state (.snakemake/: metadata, locks, incomplete markers) in ``workdir`` (default: the
    session's, session_workdir): a test never writes, nor unlocks, the checkout's .snakemake/. The
    jobs import the checkout's code (PYTHONPATH), whatever the environment installed."""
    command = [SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(workdir or session_workdir()), *args]
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def planned_jobs(output: str) -> list[tuple[str, str]]:
    """(rule, first output) of every job a `snakemake -n` printed."""
    return [(rule, outputs.split(", ")[0]) for rule, outputs in _JOB.findall(output)]


def planned_outputs(output: str, rule: str) -> list[list[str]]:
    """Every output of each job of ``rule`` that a `snakemake -n` printed, one list per job."""
    return [outputs.split(", ") for name, outputs in _JOB.findall(output) if name == rule]


def job_counts(output: str) -> Counter:
    """Jobs per rule from the 'Job stats' table of a `snakemake` run or dry run."""
    table = output.split("Job stats:", 1)[1]
    return Counter({name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.MULTILINE)
                    if name != "total"})


def copy_checkout(to: Path) -> Path:
    """The checkout's files (tracked and new, not ignored) copied to ``to``; outside a git checkout (a
    release tarball) the tree's files but the folders running the project writes (project_tree)."""
    if not is_git_checkout():
        shutil.copytree(ROOT, to, ignore=lambda folder, names: [name for name in names if _exempt(name)])
        return to
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    return to
