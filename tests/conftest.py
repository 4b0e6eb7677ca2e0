"""Shared test settings: one CPU thread (the CI machine is shared), a modest hypothesis profile, and
the ``scratch`` fixture. Shared helpers live in tests/support/."""
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import settings

torch.set_num_threads(1)
settings.register_profile("stalebench", max_examples=30, deadline=None, derandomize=True)
settings.load_profile("stalebench")


@pytest.fixture
def scratch():
    """A private temporary folder. Not pytest's tmp_path: concurrent pytest sessions on this machine
    prune each other's old base folders, which removed a grid from under a running test."""
    with tempfile.TemporaryDirectory(prefix="stalebench-test-") as path:
        yield Path(path)
