"""One folder per test run, shared by all of the run's pytest-xdist workers: what is expensive and the
same for many tests (a base model, an aggregated fabricated grid) is built there once per run, by the
first test of any worker that asks for it, and each test (or module) copies it.

The process that starts the run (xdist's controller, or the one process without xdist) makes the folder
and removes it when the run ends (a run killed by SIGKILL cannot: the next run's starting process removes
the folders of runs whose process is gone, ``remove_orphans``); the workers get its path in xdist's ``workerinput``
(tests/conftest.py's hooks call these functions). Not pytest's base temp folder: concurrent pytest
sessions on this machine prune each other's old ones (tests/conftest.py, ``scratch``)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock

KEY = "stalebench_run_folder"
PREFIX = "stalebench-run-"  # then the starting process's id: remove_orphans reads it
FOLDER = pytest.StashKey[Path]()


def configure(config: pytest.Config) -> None:
    """The run's folder in ``config.stash``: made here by the starting process, given to a worker."""
    worker = getattr(config, "workerinput", None)
    if not worker:
        remove_orphans(Path(tempfile.gettempdir()))
    config.stash[FOLDER] = Path(worker[KEY] if worker else tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def remove_orphans(root: Path) -> list[Path]:
    """Remove the folders under ``root`` of runs whose starting process is gone (a SIGKILLed run never reaches
    ``remove``); a folder whose process lives, or belongs to another user (os.kill: PermissionError), or has
    no process id in its name, stays. Returns what was removed."""
    removed = []
    for folder in root.glob(f"{PREFIX}*-*"):
        pid = folder.name[len(PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except PermissionError:
            pass
    return removed


def give_to_worker(node) -> None:
    node.workerinput[KEY] = str(node.config.stash[FOLDER])


def remove(config: pytest.Config) -> None:
    """Removes the folder once the run ends (in the process that made it)."""
    if not hasattr(config, "workerinput") and FOLDER in config.stash:
        shutil.rmtree(config.stash[FOLDER], ignore_errors=True)


def built_once(run_folder: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``run_folder/name``, made by ``build(folder)`` for the first caller of the run; a caller on another
    worker meanwhile waits on its lock, later ones find it built. A build that raised leaves nothing
    behind (the next caller builds again and fails the same way, in its own test). The folder is the
    run's: copy it, never write into it."""
    built = run_folder / name
    with FileLock(run_folder / f"{name}.lock"):
        if not built.exists():
            partial = run_folder / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            build(partial)
            partial.rename(built)  # atomic: a folder there is a whole one
    return built
