"""The command-line plumbing every stage's ``python -m ...`` entry point shares."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _names_a_file(value: str) -> bool:
    return not value.lstrip().startswith("{") and Path(value).is_file()


def _json_text(value: str) -> str:
    """``value`` itself (inline JSON) or the content of the file it names."""
    return Path(value).read_text() if _names_a_file(value) else value


def _source(value: str, flag: str) -> str:
    """What a JSON error names: the file (a damaged config.json is found by its path), else the flag."""
    return f"{flag} {value}" if _names_a_file(value) else flag


def parse_json_arg(value: str, flag: str) -> dict:
    """A JSON object given inline or as a path to a file holding one; a bad one exits naming ``flag``."""
    try:
        obj = json.loads(_json_text(value))
    except json.JSONDecodeError as error:
        raise SystemExit(f"{_source(value, flag)}: not valid JSON ({error})") from None
    if not isinstance(obj, dict):
        raise SystemExit(f"{flag}: expected a JSON object, got {type(obj).__name__}")
    return obj


# A stage's exit status says why it stopped, so that a caller (Snakemake's retries, a script) can tell:
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # bad input or a missing/malformed file: the message names it; rerunning will not help
EXIT_LOCKED = 3  # another process writes the same run or grid (harness.lock): the message names it
# EXIT_RESUME (75, harness.engine): stopped before the job's time limit, its state saved; run again


def run_stage(prog: str, work, describe) -> int:
    """Run ``work()`` and return the stage's exit status: success is one line ``describe(result,
    seconds)`` and EXIT_OK; bad input or a missing/malformed file (ValueError, OSError) one clear
    line and EXIT_BAD_INPUT; a held writer lock EXIT_LOCKED; a stop before the time limit
    (harness.engine.TimeLimitReached) EXIT_RESUME."""
    from harness.engine import EXIT_RESUME, TimeLimitReached
    from harness.lock import RunLocked

    start = time.perf_counter()
    try:
        result = work()
    except TimeLimitReached as stop:
        print(f"{prog}: {stop}", file=sys.stderr)
        return EXIT_RESUME
    except RunLocked as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_LOCKED
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{prog}: {describe(result, time.perf_counter() - start)}", file=sys.stderr)
    return EXIT_OK


def run_each(prog: str, items: list, work, describe) -> int:
    """``run_stage`` for each item in turn, in one process (a packed job: the runs of a cell, each with
    its own lock, status and resume). Every item is tried, so that one bad run does not hold back the
    others; a stop before the time limit ends the job at once (its retry resumes where it stopped).
    The job's status: the first non-zero item's, else EXIT_OK."""
    from harness.engine import EXIT_RESUME

    status = EXIT_OK
    for item in items:
        code = run_stage(prog, lambda item=item: work(item),
                         lambda result, seconds, item=item: describe(item, result, seconds))
        if code == EXIT_RESUME:
            return code
        status = status or code
    return status
