"""Tests of optional inputs (a data file, SLURM installed and root): where the input
is missing the test skips with the reason, unless $STALEBENCH_REQUIRE names it, and then it fails.
CI sets STALEBENCH_REQUIRE to everything it provides (.ci/run), so nothing is skipped there by
accident; only what needs hardware (a GPU) may still skip."""
from __future__ import annotations

import os

import pytest

SETTING = "STALEBENCH_REQUIRE"


def required(name: str) -> bool:
    return name in os.environ.get(SETTING, "").replace(",", " ").split()


def missing(name: str, reason: str):
    """Skip the calling test for ``reason``; fail it instead where $STALEBENCH_REQUIRE names ``name``."""
    if required(name):
        pytest.fail(f"{reason} (and {SETTING} requires {name!r}, so this is a failure, not a skip)")
    pytest.skip(f"{reason} (set {SETTING}={name} to make this a failure)")
