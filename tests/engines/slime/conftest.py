"""The Table-1 grid config, its paths in the test's folder: the fixture of the launcher's tests."""
from __future__ import annotations

import pytest

from tests.support.fake_ray import table1_config


@pytest.fixture
def table1(tmp_path):
    return table1_config(tmp_path)
