"""One writer at a time: an exclusive lock on a lock file, the one lock primitive of the project
(a run's locks/<name>.lock through harness.run.RunDir.lock, a grid's tracking.lock for MLflow).

    with RunDir(path).lock("train", "train"):
        ...                       # nobody else writes train/ meanwhile

A second process asking for the same lock fails at once with ``RunLocked``, whose message names
the holder (host, pid, SLURM job id, what it does, since when) and how to stop it; one told to wait
(``wait_s``, e.g. every writer of a shared MLflow store: tracking.store.store_lock) says once on
stderr whom it waits for. The lock is ``fcntl.flock`` on an open file: the kernel drops it when the
holder exits, however it dies, so a stale lock cannot outlive its process (on NFS, Linux maps flock
to POSIX locks, held through the server). The file is never deleted (deleting a lock file lets two
processes lock two different files); it holds the current or last holder's description, as JSON,
marked ``released`` when its holder let go: a description without that mark, found by the next
holder, is one whose process died holding the lock, and the next holder says on stderr that it takes
it over.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path


class RunLocked(RuntimeError):
    """Another process writes this run; the message names it."""


def holder() -> dict:
    """This process, as a lock holder describes itself."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def who(info: dict | None) -> str:
    """A holder's description as the lock's messages name it."""
    if not info:
        return "an unknown process (it has not written its description yet)"
    return (f"host {info.get('host')}, pid {info.get('pid')}, SLURM job {info.get('slurm_job_id') or '-'} "
            f"({info.get('purpose')}, since {info.get('since')})")


def describe(info: dict | None) -> str:
    if not info:
        return who(info)
    job = info.get("slurm_job_id")
    stop = f"scancel {job}" if job else f"kill {info.get('pid')} on {info.get('host')}"
    return f"{who(info)}; wait for it to end, or stop it ({stop}) and run again"


@contextlib.contextmanager
def writer_lock(path: str | Path, purpose: str, wait_s: float = 0.0):
    """Hold the exclusive lock ``path`` for the ``with`` block. Held by another process: wait up to
    ``wait_s`` seconds (default: not at all; ``math.inf``: until it is free), then raise ``RunLocked``
    naming the holder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    waiting = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RunLocked(f"{path} is held by another writer: {describe(_read(fd))}") from None
                if not waiting:
                    print(f"{path} is held by {who(_read(fd))}: waiting for it", file=sys.stderr, flush=True)
                    waiting = True
                time.sleep(min(0.1, max(deadline - time.monotonic(), 0.01)))
        last = _read(fd)
        if last and not last.get("released"):
            print(f"{path}: taking over the lock of {who(last)}, which ended without releasing it",
                  file=sys.stderr, flush=True)
        description = {**holder(), "purpose": purpose}
        _write(fd, description)
        try:
            yield
        finally:  # an error in the block lets go of the lock as cleanly as its end
            _write(fd, {**description, "released": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write(fd: int, info: dict) -> None:
    """In place (a rename would swap the locked file); readers tolerate a partial write."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info, sort_keys=True).encode(), 0)
    os.fsync(fd)


def _read(fd: int) -> dict | None:
    raw = os.pread(fd, 65536, 0)
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return None
