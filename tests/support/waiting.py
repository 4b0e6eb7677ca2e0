"""Waiting for a file a running process writes (a checkpoint, a score line): no event says when it
appears, so the condition is polled, and the wait fails with what it waited for and why: the
process exited first, or a deadline generous enough for a loaded machine passed."""
from __future__ import annotations

import subprocess
import time
from typing import Callable

GENEROUS_S = 600.0  # a step or a checkpoint takes seconds here, minutes on a loaded shared box


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen | None = None,
               timeout_s: float = GENEROUS_S, poll_s: float = 0.01) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` if ``process`` exits before it does,
    or ``timeout_s`` passes."""
    start = time.monotonic()
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}")
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(poll_s)
