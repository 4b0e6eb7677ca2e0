"""Kill a run at an exact write: the file-system calls a run makes, counted, and a forked process
that SIGKILLs itself just before or just after the k-th one.

A run folder changes only at these calls (a file created, written, synced, renamed or removed), so
killing before and after each of them reaches every state that a kill -9 at any instant can leave on
disk; a kill inside one call (a half-written temp file) leaves what "before" leaves plus a partial
file under a temp name. Counting a run once (``counted``) gives the number of kill points.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import tempfile
import traceback

import pytest
import safetensors.torch

import engines.tiny.checkpoint

# (owner, name) of every call through which a run writes: os's primitives (Path.mkdir, tempfile and
# shutil.rmtree go through them too) and the calls that write a whole file
WRITE_CALLS = [(os, "replace"), (os, "rename"), (os, "fsync"), (os, "mkdir"), (os, "unlink"), (os, "rmdir"),
               (os, "ftruncate"), (os, "pwrite"), (tempfile, "mkstemp"), (tempfile, "mkdtemp"),
               (shutil, "rmtree"), (pathlib.Path, "write_text"), (pathlib.Path, "write_bytes"),
               (safetensors.torch, "save_file"), (engines.tiny.checkpoint, "save_file")]


@contextlib.contextmanager
def counted(kill_at: int | None = None):
    """Count the write calls made in the block (the list holds the count); with ``kill_at``, SIGKILL
    this process at event ``kill_at`` (events 2i-1 and 2i: just before and just after call i)."""
    count = [0]

    def event() -> None:
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(call):
        def wrapped(*args, **kwargs):
            event()
            result = call(*args, **kwargs)
            event()
            return result
        return wrapped

    with pytest.MonkeyPatch.context() as patch:
        for owner, name in WRITE_CALLS:
            patch.setattr(owner, name, wrap(getattr(owner, name)))
        yield count


def forked(work, kill_at: int | None = None) -> int:
    """The pid of a forked child running ``work()`` (killing itself at write event ``kill_at``, if
    given); it exits 0 when work ends, 1 (traceback on stderr) when it raises."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            with counted(kill_at):
                work()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    """A child's exit status as os.waitstatus_to_exitcode gives it (-9 when killed)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def run_killed_at(work, kill_at: int) -> int:
    """``work()`` in a forked child that kills itself at write event ``kill_at``; its exit status
    (-9 when killed, 0 when work ended first)."""
    return exit_code(forked(work, kill_at))
