"""Two grids' syncs started at once: a tracking.sync process that has imported MLflow before the race,
so that both syncs of a pair reach the store within milliseconds of each other (a fresh interpreter
spends seconds, and a varying number of them, importing MLflow first).

    python -m tests.support.sync_race   # then one grid folder per stdin line

It prints ``ready``, then for each line runs tracking.sync's main on that config (the final sync,
as the track rule does) and answers one JSON line: the exit status and the end of stderr (an
exception that escapes main is status 1 with its traceback, as in a fresh process).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback

import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (imported before the race, see above)

from tracking.sync import main


def serve() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                status = main(["--grid", line.strip()])
            except Exception:
                traceback.print_exc()
                status = 1
        print(json.dumps({"status": status, "stderr": err.getvalue()[-4000:]}), flush=True)


if __name__ == "__main__":
    serve()
