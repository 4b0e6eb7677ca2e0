"""What a test suite may not change: the checkout's files. ``tree_state()`` records git's view of
the tracked files and every untracked file (ignored ones too) with its size and mtime, outside the
folders that running the project or its tools writes by design."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Outputs of the workflow and its metadata, the environment, and the caches of Python and the test tools.
EXEMPT_FOLDERS = ("results", ".snakemake", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache")


def _exempt(relative: str) -> bool:
    parts = Path(relative).parts
    return any(part in EXEMPT_FOLDERS or part.endswith(".egg-info") for part in parts)


def _git(*args: str) -> list[str]:
    out = subprocess.run(["git", *args, "-z"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [entry for entry in out.split("\0") if entry]


def _stat(path: Path) -> tuple[int, int] | None:
    if not path.is_file():
        return None
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def is_git_checkout() -> bool:
    """Whether the project tree is a git checkout's top (not a release tarball, nor a folder inside another repository)."""
    found = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True)
    return found.returncode == 0 and Path(found.stdout.strip()).resolve() == ROOT


def tree_state() -> dict[str, dict]:
    """{"tracked": {git status line of a changed tracked file: its (size, mtime_ns)}, "untracked":
    {path: (size, mtime_ns)}}. The stat of a tracked file that was already changed shows a rewrite.
    Outside a git checkout, every file of the tree is "untracked"."""
    if not is_git_checkout():
        return {"tracked": {}, "untracked": {str(path.relative_to(ROOT)): _stat(path) for path in ROOT.rglob("*")
                                             if path.is_file() and not _exempt(str(path.relative_to(ROOT)))}}
    tracked = {entry: _stat(ROOT / entry[3:]) for entry in _git("status", "--porcelain", "--untracked-files=no")}
    untracked = {}
    for name in _git("ls-files", "--others", "--exclude-standard") + _git(
            "ls-files", "--others", "--ignored", "--exclude-standard", "--directory"):
        if _exempt(name):
            continue
        path = ROOT / name
        for file in (path.rglob("*") if path.is_dir() else [path]):
            if file.is_file() and not _exempt(str(file.relative_to(ROOT))):
                untracked[str(file.relative_to(ROOT))] = _stat(file)
    return {"tracked": tracked, "untracked": untracked}


def tree_changes(before: dict, after: dict) -> list[str]:
    """What changed between two states, one line per path: tracked files whose git status or file
    changed, and untracked files added, removed or rewritten."""
    changes = []
    for kind in ("tracked", "untracked"):
        for name in sorted(before[kind].keys() | after[kind].keys()):
            if name not in after[kind]:
                changes.append(f"{kind}, gone: {name}")
            elif name not in before[kind]:
                changes.append(f"{kind}, new: {name}")
            elif before[kind][name] != after[kind][name]:
                changes.append(f"{kind}, rewritten: {name}")
    return changes
