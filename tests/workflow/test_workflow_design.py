"""The declared design pinned at the first look (grid.design), through the real `snakemake`: after a finished
grid, a request that reads its runs another way (`-C seeds=[0]`, two of its three claims) is refused before
any job, naming what differs and the command that does it right, and leaves the grid's answer byte for byte."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.support.workflow_cli import snakemake

# grpo_twin is grpo under another name: three claims on one contrast, enough for a family to shrink.
CLAIMS = [{"name": f"twin_{expect}", "kind": "recipes", "recipe": "grpo_twin", "versus": "grpo", "lag": 1,
           "expect": expect, "smallest_effect": 0.05} for expect in ("greater", "less", "equivalent")]
SMALL = {"grid": "pinned", "recipes": ["grpo", "grpo_twin"], "baseline": "grpo", "lags": [1], "seeds": [0, 1],
         "claims": CLAIMS, "seeding": None, "steps": 4, "eval_every": 2, "extra_recipes": {"grpo_twin": {"loss": "grpo"}},
         "engine_params": {"preset": "demo", "warmstart_steps": 10},
         "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}}}
ANSWER = ("table.md", "table.csv", "summary.json", "config.json", "design.json", "mlflow.json")


@pytest.mark.slow  # a grid trained by Snakemake
@pytest.mark.timeout(900)
def test_a_request_that_reads_a_finished_grid_another_way_is_refused_and_leaves_its_answer(tmp_path):
    results, state = tmp_path / "results", tmp_path / "state"
    args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in SMALL.items())]
    done = snakemake("-c2", *args, workdir=state, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = results / "pinned"
    design = json.loads((folder / "design.json").read_text())
    assert (design["seeds"], design["m"], design["looks"], design["alpha"]) == ([0, 1], 3, [2], 0.05)
    before = {name: (folder / name).read_bytes() for name in ANSWER}
    shutil.rmtree(state / ".snakemake")  # Snakemake's records gone (a copied grid, a new checkout): no help from them
    for override, differs in ((["seeds=[0]"], "seeds [0, 1] -> [0]"),
                              ([f"claims={json.dumps(CLAIMS[:2])}"], "claims [twin_greater, twin_less, twin_equivalent]"
                                                                    " -> [twin_greater, twin_less]; m 3 -> 2")):
        again = snakemake("-c2", *args, *override, workdir=state)
        said = again.stdout + again.stderr
        assert again.returncode != 0 and f"{folder / 'design.json'} pins the design" in said, said[-3000:]
        assert differs in said and "add -C grid=NAME" in said, said[-3000:]
        assert {name: (folder / name).read_bytes() for name in ANSWER} == before
    same = snakemake("-c2", *args, workdir=state)  # the declared request still runs
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
