"""Kill an MLflow sync at an exact store write: the calls through which tracking.writer changes the
store, counted, and a process that SIGKILLs itself just before the k-th one.

Each of these calls is one transaction of the store (a SQL commit), so killing before each of them
reaches every state a kill -9 at any instant can leave in the store.

    python -m tests.support.mlflow_kill K -- <tracking.sync arguments>   # killed before write K
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

import pytest

# MlflowClient's calls that change a store (the ones tracking.writer makes)
WRITES = ("create_experiment", "restore_experiment", "set_experiment_tag", "create_run", "log_batch",
          "update_run", "set_terminated")


@contextlib.contextmanager
def counted(kill_at: int | None = None):
    """Record the store writes made in the block (the list holds (call, run id or name) per write);
    with ``kill_at``, SIGKILL this process just before write ``kill_at`` (1-based)."""
    from mlflow.tracking import MlflowClient
    calls: list[tuple[str, str]] = []

    def wrap(name, call):
        def wrapped(self, *args, **kwargs):
            calls.append((name, str(args[0]) if args else ""))
            if len(calls) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return call(self, *args, **kwargs)
        return wrapped

    with pytest.MonkeyPatch.context() as patch:
        for name in WRITES:
            patch.setattr(MlflowClient, name, wrap(name, getattr(MlflowClient, name)))
        yield calls


if __name__ == "__main__":
    from tracking.sync import main

    kill_at, arguments = int(sys.argv[1]), sys.argv[sys.argv.index("--") + 1:]
    with counted(kill_at):
        status = main(arguments)
    sys.exit(status)
