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
"""
from __future__ import annotations

import pytest
from xdist.scheduler import LoadGroupScheduling

SENT_FIRST = (("slurm",), ("slow", "browser"))  # the markers of the longest tests, longest first


class ModuleOrGroup(LoadGroupScheduling):
    """xdist's ``loadgroup``, but a test without an ``xdist_group`` goes with its module, not alone."""

    def _split_scope(self, nodeid: str) -> str:
        group = super()._split_scope(nodeid)
        return group if group != nodeid else nodeid.split("::")[0]


def _rank(item: pytest.Item) -> int:
    return next((rank for rank, names in enumerate(SENT_FIRST) if any(map(item.get_closest_marker, names))),
                len(SENT_FIRST))


def slowest_first(items: list[pytest.Item]) -> None:
    """Each module ranked by its test marked earliest in SENT_FIRST, the modules sorted by rank, in
    place; the order is otherwise kept (a module's tests stay together: its module fixtures are set
    up once)."""
    rank: dict = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, len(SENT_FIRST)), _rank(item))
    items.sort(key=lambda item: rank[item.path])
