"""analysis.schedule.looks.scheduled_runs on a fabricated grid of three looks: each later look is read at its
own level on the runs through it, so a claim decided at look 2 gets no seeds of look 3 (issue 63: a planted
bug that read every later look as look 1 asked for 27 runs here, and no test had three looks)."""
from __future__ import annotations

import numpy as np

from analysis.schedule.looks import after_look, scheduled_runs
from grid.config import validate
from grid.settings import Config
from tests.support import grid_fixture

# per-seed shifts of the two recipes' scores over grpo's (seeds 0-8): sat_grpo +0.2 with a spread that three
# seeds cannot pin down and six can (exceeds at look 2); grpo_r3's sign undecided at every look
SHIFT = {"sat_grpo": [0.10, 0.30, 0.20, 0.19, 0.21, 0.20, 0.20, 0.20, 0.20],
         "grpo_r3": [0.0, 0.2, -0.2, 0.1, -0.1, 0.0, 0.15, -0.15, 0.0]}
CLAIMS = [{"name": f"{recipe}_beats_grpo", "kind": "recipes", "recipe": recipe, "versus": "grpo", "lag": 1,
           "expect": "greater", "smallest_effect": 0.05} for recipe in SHIFT]
SEEDING = {"looks": [3, 6, 9], "boundary": "pocock"}


def _scores(recipe: str, lag: int, seed: int) -> list[float]:
    base = [0.30 + 0.02 * i + float(np.random.default_rng(seed).uniform(0, 0.01)) for i in range(4)]
    return [round(v + (SHIFT[recipe][seed] if recipe in SHIFT else 0.0), 4) for v in base]


def test_each_later_look_reads_its_own_level_so_a_pair_decided_at_look_two_gets_no_third_look(tmp_path, monkeypatch):
    monkeypatch.setattr(grid_fixture, "scores_of", _scores)
    written = grid_fixture.make_grid(tmp_path, seeds=range(9), lags=(1,))
    config = Config.build(validate({**written, "claims": CLAIMS, "seeding": SEEDING}))
    cells = [("grpo", 1), ("sat_grpo", 1), ("grpo_r3", 1)]
    assert scheduled_runs(config, through=1) == [(r, 1, s) for r, _ in cells for s in range(3)]
    assert after_look(config, scheduled_runs(config, through=1), 1) == cells  # both claims open at 3 seeds
    assert after_look(config, scheduled_runs(config, through=2), 2) == [("grpo", 1), ("grpo_r3", 1)]
    runs = scheduled_runs(config)
    assert len(runs) == 9 + 9 + 6  # look 3 adds seeds 6-8 to the open claim's two cells only
    assert [run for run in runs if run[0] == "sat_grpo"] == [("sat_grpo", 1, s) for s in range(6)]
    assert runs == sorted(runs, key=list(config.grid_runs).index)  # in the grid's order
