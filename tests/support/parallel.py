"""How `make test` shares the tests out between pytest-xdist's workers (one per core: `-n`, with
pyproject's ``--dist loadgroup --no-loadscope-reorder``; tests/conftest.py's hooks call these):

- a module's tests run on one worker, one after another, so that its module-scoped fixtures (a grid
  run by Snakemake, a synced MLflow store) are built once; modules run side by side;
- tests that must never run at the same time, wherever they are (the one SLURM test cluster per
  machine), name the thing they share with one marker, ``@pytest.mark.xdist_group("slurm_cluster")``:
  all the tests of a group run on one worker, in turn;
- the modules with a ``slurm`` test are sent out first (the SLURM grid is the longest test), then
  those with a ``slow`` or ``browser`` test, then the rest: a long module started last would run
  while the other worker has nothing left to run beside it.

xdist 3.8's own ``loadgroup`` does not see the groups under pytest 9.2: it renames each grouped test
(``item._nodeid``), an attribute pytest 9 no longer reads. So each worker writes the groups it collected
into the run's folder (tests/support/run_folder.py) before it reports its collection, and the scheduler,
which starts once every worker has reported, reads them there.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from harness.io import write_json_atomic
from tests.support.run_folder import FOLDER

SENT_FIRST = (("slurm",), ("slow", "browser"))  # the markers of the longest tests, longest first
GROUPS = "xdist_groups.json"  # in the run's folder: test id -> its xdist_group


class ModuleOrGroup(LoadScopeScheduling):
    """The unit of work of a test is its ``xdist_group``, or else its module."""

    def __init__(self, config: pytest.Config, log=None):
        super().__init__(config, log)
        self.groups_file = config.stash[FOLDER] / GROUPS
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:  # first called once every worker has collected (and so written the file)
            self.groups = json.loads(self.groups_file.read_text())
        return self.groups.get(nodeid) or nodeid.split("::")[0]


def _rank(item: pytest.Item) -> int:
    return next((rank for rank, names in enumerate(SENT_FIRST) if any(map(item.get_closest_marker, names))),
                len(SENT_FIRST))


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def plan(items: list[pytest.Item], run_folder: Path) -> None:
    """On a worker: the modules sorted by their test marked earliest in SENT_FIRST, in place (the order
    is otherwise kept: a module's tests stay together, its module fixtures set up once), and the
    groups written for ModuleOrGroup."""
    rank: dict = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, len(SENT_FIRST)), _rank(item))
    items.sort(key=lambda item: rank[item.path])
    write_json_atomic(run_folder / GROUPS, {item.nodeid: _group(item) for item in items if _group(item)})
