"""Claims: declared in the config and checked before any job runs; answered by analysis.aggregate
on a fabricated grid, with the verdicts first in table.md, in table.csv and in summary.json."""
import csv
import json

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.aggregate import main
from analysis.claims import verdict
from harness.config import load
from harness.model import Claim
from tests.support.grid_fixture import CLAIMS, make_grid


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    config = {**make_grid(root), "claims": CLAIMS}
    out = root / config["grid"]
    assert main(["--config-json", json.dumps(config), "--out", str(out)]) == 0
    return config, out, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("path", ["config.yaml", "workflow/presets/field.yaml", "workflow/presets/table1.yaml"])
def test_every_shipped_config_declares_claims(path):
    claims = load(path)["claims"]
    assert claims and all(c["metric"] in ("auc", "fixed", "best") for c in claims)


def test_verdicts_follow_the_tests(grid):
    config, _, summary = grid
    claims = {c["name"]: c for c in summary["claims"]}
    cells = {(c["recipe"], c["lag"]): c for c in summary["cells"]}
    # grpo's staleness cost on AUC: scipy's paired t of the per-seed values (seeds pair)
    a8, a1 = (np.array(cells["grpo", lag]["per_seed"]["auc"]) for lag in (8, 1))
    reference = stats.ttest_rel(a8, a1)
    cost = claims["grpo_cost"]
    assert cost["method"] == "paired-t" and cost["n"] == 3 and cost["metric"] == "auc"
    assert (cost["estimate"], cost["p"]) == (pytest.approx(np.mean(a8 - a1)), pytest.approx(reference.pvalue))
    # Holm over the claims only: the family is the five claims
    adjusted = multipletests([c["p"] for c in summary["claims"]], method="holm")[1]
    assert [c["p_holm"] for c in summary["claims"]] == pytest.approx(list(adjusted))
    assert all(c["family_size"] == 5 for c in summary["claims"])
    for claim in summary["claims"]:
        name, why = verdict(Claim.build(next(c for c in config["claims"] if c["name"] == claim["name"])
                                        | {"metric": claim["metric"]}), claim)
        assert (claim["verdict"], claim["why"]) == (name, why)
        if claim["verdict"] == "inconclusive":
            needed = claim["seeds_needed"]
            assert needed >= 2
            assert f"about {needed} seeds" in claim["why"] or f"(about {needed} would)" in claim["why"]
    # sat_grpo's lag-8 seeds sit within 10 points of its equal lag-1 seeds: TOST shows it
    assert claims["sat_no_cost"]["verdict"] == "equivalent" and claims["sat_no_cost"]["test"] == "tost (paired-t)"
    collapse = claims["grpo_collapses_at_lag8"]
    assert collapse["test"] == "log-rank" and collapse["estimate"] == pytest.approx(2 / 3)


def test_verdicts_open_table_md_and_reach_csv_and_conclusions(grid):
    _, out, summary = grid
    markdown = (out / "table.md").read_text()
    first = markdown.index("## ", markdown.index("\n"))
    assert markdown[first:].startswith("## Claims (confirmatory")
    rows = [r for r in csv.DictReader((out / "table.csv").open()) if r["claim"]]
    assert [r["claim"] for r in rows] == [c["name"] for c in summary["claims"]]
    for row, claim in zip(rows, summary["claims"]):
        assert row["claim_verdict"] == claim["verdict"] and claim["verdict"] in markdown
        assert float(row["claim_p"]) == pytest.approx(claim["p"])
    lines = summary["conclusions"]
    assert lines[0].startswith("Claims (confirmatory, Holm over 5)")
    assert all(lines[i + 1].startswith(c["name"]) for i, c in enumerate(summary["claims"]))


@pytest.mark.parametrize("tested, expect, kind, expected", [
    ({"estimate": -0.1, "low": -0.15, "high": -0.05, "p_holm": 0.01}, "less", "staleness_cost", "supported"),
    ({"estimate": 0.1, "low": 0.05, "high": 0.15, "p_holm": 0.01}, "less", "staleness_cost", "contradicted"),
    ({"estimate": 0.01, "low": -0.01, "high": 0.03, "p_holm": 0.4}, "greater", "recipes", "contradicted"),
    ({"estimate": 0.04, "low": -0.01, "high": 0.09, "p_holm": 0.2}, "greater", "recipes", "inconclusive"),
    ({"estimate": 0.0, "low": -0.02, "high": 0.02, "p_holm": 0.01}, "equivalent", "recipes", "equivalent"),
    ({"estimate": 0.2, "low": 0.1, "high": 0.3, "p_holm": 1.0}, "equivalent", "recipes", "contradicted"),
    ({"estimate": 0.6, "low": 0.1, "high": 0.9, "z": 2.5, "p_holm": 0.01}, "greater", "collapse", "supported"),
    ({"estimate": 0.0, "low": -0.4, "high": 0.4, "z": None, "p_holm": None}, "greater", "collapse", "inconclusive"),
])
def test_verdict_rules(tested, expect, kind, expected):
    claim = Claim(name="c", kind=kind, recipe="a", lag=8, expect=expect, smallest_effect=0.05, metric="auc",
                  versus=None if kind == "staleness_cost" else "b", versus_lag=8 if kind == "collapse" else None)
    assert verdict(claim, {"seeds_needed": 9, "n": 3, **tested})[0] == expected


def test_inconclusive_with_enough_seeds_says_the_estimate_decides_not_the_seed_count():
    # the field's sat_gspo cost: -4.6 [-6.8, -2.4] at 5 seeds against a 5-point margin
    claim = Claim(name="c", kind="staleness_cost", recipe="a", lag=8, expect="equivalent", smallest_effect=0.05,
                  metric="auc", versus=None, versus_lag=None)
    tested = {"estimate": -0.046, "low": -0.068, "high": -0.024, "p_holm": 0.3, "seeds_needed": 3, "n": 5}
    name, why = verdict(claim, tested)
    assert name == "inconclusive" and "5 seeds per cell already give 80% power" in why and "margin" in why
    assert verdict(claim, {**tested, "n": 2})[1] == "about 3 seeds per cell would resolve it at the declared effect"
