"""Drive the real `snakemake` CLI of the project's environment from tests (repo root as workdir)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.support.project_tree import _exempt, is_git_checkout

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
_JOB = re.compile(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    output: (.*)$", re.MULTILINE)


def snakemake(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


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
