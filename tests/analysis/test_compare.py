"""analysis.report.compare: two grids' summary.json side by side. Synthetic summaries with known cells (a
hand-worked Welch interval, a noisy reproduction that agrees, a shifted cell, a flipped verdict) and
real grids fabricated on disk and summarized by analysis.cells.summary."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from analysis.cells.summary import collect
from analysis.claims.summary_file import write_summary
from analysis.report.compare import main
from analysis.report.write import summarize
from analysis.statistics.intervals import mean_ci
from grid.config import validate
from grid.settings import Config
from harness.io import write_json_atomic
from tests.support import grid_fixture

pytestmark = pytest.mark.slow  # two aggregated grids

CLAIM = {"name": "a_cost", "kind": "staleness_cost", "recipe": "a", "lag": 8, "expect": "less", "smallest_effect": 0.05,
         "metric": "auc", "statement": "staleness cost of a (lag 8 minus lag 1), AUC: < 0",
         "verdict": "supported", "estimate": -0.1, "low": -0.15, "high": -0.05, "method": "paired-t"}


def synthetic(cells: dict, claims=(CLAIM,), seeds=(0, 1, 2, 3, 4), steps=120) -> dict:
    """A summary.json with the keys analysis.report.compare reads: cells {(recipe, lag): (auc, fixed, collapsed k)}."""
    def cell(recipe, lag, auc, fixed, k):
        per_seed = {"auc": list(auc), "fixed": list(fixed)}
        return {"recipe": recipe, "lag": lag, "seeds": list(seeds), "per_seed": per_seed,
                "stats": {m: mean_ci(v).as_dict() for m, v in per_seed.items()},
                "collapse": {"k": k, "n": len(seeds)}}
    return {"grid": "g", "engine": "tiny", "seeds": list(seeds), "steps": steps, "test_task": "tiny_test",
            "fixed_step": None, "collapse_fraction": 0.5, "claims": list(claims),
            "cells": [cell(recipe, lag, *values) for (recipe, lag), values in cells.items()]}


def noisy_grid(seed: int, shift: float = 0.0) -> dict:
    """Recipes a, b at lags 1, 8, five seeds of normal scores (sd 2 points); ``shift`` moves a's lag-8 AUC."""
    rng = np.random.default_rng(seed)
    means = {("a", 1): 0.70, ("a", 8): 0.60, ("b", 1): 0.70, ("b", 8): 0.68}
    return synthetic({key: (rng.normal(mean + (shift if key == ("a", 8) else 0), 0.02, 5),
                            rng.normal(mean, 0.03, 5), 0) for key, mean in means.items()})


def compare(tmp_path, a: dict, b: dict, *flags) -> int:
    write_json_atomic(tmp_path / "a" / "summary.json", a)
    write_json_atomic(tmp_path / "b.json", b)
    return main([str(tmp_path / "a"), str(tmp_path / "b.json"), *flags])


def compared(tmp_path, capsys, a: dict, b: dict) -> tuple[int, dict]:
    status = compare(tmp_path, a, b, "--json")
    return status, json.loads(capsys.readouterr().out)


def row(result: dict, recipe: str, lag: int, metric: str) -> dict:
    return next(r for r in result["cells"] if (r["recipe"], r["lag"], r["metric"]) == (recipe, lag, metric))


def test_a_cell_difference_is_welch_satterthwaite_worked_by_hand(tmp_path, capsys):
    # AUC: A 60, 62, 64 (sd 2 points), B 50, 54, 58 (sd 4): B - A = -8 points,
    # se^2 = 0.02^2/3 + 0.04^2/3 = 0.002/3, df = (0.002/3)^2 / ((0.0004/3)^2/2 + (0.0016/3)^2/2) = 50/17,
    # t(0.975, 50/17) = 3.2188: -0.08 -+ 3.2188 * 0.025820 = [-0.1631, +0.0031]
    a = synthetic({("a", 1): ([0.60, 0.62, 0.64], [0.5] * 3, 0)}, seeds=(0, 1, 2))
    b = synthetic({("a", 1): ([0.50, 0.54, 0.58], [0.5] * 3, 1)}, seeds=(0, 1, 2))
    _, result = compared(tmp_path, capsys, a, b)
    auc = row(result, "a", 1, "auc")["difference"]
    assert auc["method"] == "welch-satterthwaite"  # the same seed numbers, yet two grids never pair
    assert auc["estimate"] == pytest.approx(-0.08)
    assert auc["se"] == pytest.approx(math.sqrt(0.002 / 3)) and auc["df"] == pytest.approx(50 / 17)
    assert (auc["low"], auc["high"]) == (pytest.approx(-0.16311, abs=1e-5), pytest.approx(0.00311, abs=1e-5))
    assert auc["p"] == pytest.approx(stats.ttest_ind([0.50, 0.54, 0.58], [0.60, 0.62, 0.64], equal_var=False).pvalue)
    collapse = row(result, "a", 1, "collapse")["difference"]
    assert (collapse["estimate"], collapse["p"], collapse["method"]) == (pytest.approx(1 / 3), 1.0, "newcombe")
    # fixed: every seed 0.5 in both grids: no spread, equal means, no test
    fixed = row(result, "a", 1, "fixed")
    assert fixed["difference"]["method"] == "degenerate" and fixed["differs"] is False
    assert result["tests"] == 2 and row(result, "a", 1, "auc")["difference"]["p_holm"] == pytest.approx(2 * auc["p"])


def test_a_noisy_reproduction_agrees(tmp_path, capsys):
    status = compare(tmp_path, noisy_grid(1), noisy_grid(2))
    markdown = capsys.readouterr().out
    assert status == 0
    assert "**The grids agree within their noise**: none of the 12 cell comparisons differs" in markdown
    assert "| a | 8 | AUC |" in markdown and "| a_cost: staleness cost of a" in markdown


def test_a_shifted_cell_does_not_agree(tmp_path, capsys):
    status, result = compared(tmp_path, capsys, noisy_grid(1), noisy_grid(2, shift=0.10))
    assert status == 1 and not result["agree"]
    assert [(r["recipe"], r["lag"], r["metric"]) for r in result["cells"] if r["differs"]] == [("a", 8, "auc")]
    shifted = row(result, "a", 8, "auc")["difference"]
    assert shifted["low"] > 0.05 and shifted["p_holm"] < 0.05 and all(c["same_verdict"] for c in result["claims"])
    compare(tmp_path, noisy_grid(1), noisy_grid(2, shift=0.10))
    assert "cells that differ after Holm over 12: a lag 8 AUC." in capsys.readouterr().out


def test_a_flipped_verdict_does_not_agree(tmp_path, capsys):
    status = compare(tmp_path, noisy_grid(1), {**noisy_grid(1), "claims": [{**CLAIM, "verdict": "inconclusive"}]})
    markdown = capsys.readouterr().out
    assert status == 1
    assert "**The grids do not agree within their noise**: claims with another verdict: a_cost (supported in A, " \
           "inconclusive in B)." in markdown
    assert "| **no** |" in markdown


def test_a_claim_neither_narrowed_grid_tests_is_shown_without_an_interval(tmp_path, capsys):
    """A claim a narrowed grid cannot test has a verdict and no estimate (analysis.claims.verdicts): the
    Markdown shows the verdict, where it once stopped on the missing estimate."""
    untested = {"name": "b_cost", "kind": "staleness_cost", "recipe": "b", "lag": 8, "expect": "less",
                "smallest_effect": 0.05, "metric": "auc", "statement": "staleness cost of b (lag 8 minus lag 1)",
                "verdict": "not tested in this grid"}
    claims = [CLAIM, untested]
    status = compare(tmp_path, {**noisy_grid(1), "claims": claims}, {**noisy_grid(1), "claims": claims})
    markdown = capsys.readouterr().out
    assert status == 0
    assert "| **not tested in this grid** | **not tested in this grid** | yes |" in markdown


def test_cells_and_claims_of_one_grid_are_listed_not_compared(tmp_path, capsys):
    a = noisy_grid(1)
    b = {**noisy_grid(2), "cells": noisy_grid(2)["cells"][:3],
         "claims": [{**CLAIM, "statement": "another question"}, {**CLAIM, "name": "b_only"}]}
    status, result = compared(tmp_path, capsys, a, b)
    assert status == 0 and result["claims"] == [] and result["tests"] == 9
    assert result["cells_only_in"] == {"a": [["b", 8]], "b": []}
    assert result["claims_only_in"] == {"a": [], "b": ["b_only"]} and result["claims_defined_differently"] == ["a_cost"]
    compare(tmp_path, a, b)
    markdown = capsys.readouterr().out
    assert "## Not compared\n\n- cells only in A: b lag 8\n- claims only in B: b_only\n" in markdown
    assert "- claims of one name but other statements: a_cost" in markdown and "| b | 8 |" not in markdown


def test_bad_input_is_one_line_naming_the_file_or_key(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "nowhere")]) == 2
    assert str(tmp_path / "nowhere") in capsys.readouterr().err
    (tmp_path / "other.json").write_text('{"cells": []}')
    assert main([str(tmp_path / "other.json"), str(tmp_path / "other.json")]) == 2
    assert f"{tmp_path / 'other.json'}: no key 'grid': not a summary.json" in capsys.readouterr().err
    assert compare(tmp_path, noisy_grid(1), {**noisy_grid(1), "steps": 200}) == 2
    assert "summary.json key 'steps' is 120 in" in capsys.readouterr().err
    assert compare(tmp_path, noisy_grid(1), {**noisy_grid(1), "cells": noisy_grid(1)["cells"][:0]}) == 2
    assert "the grids share no cell" in capsys.readouterr().err


CLAIMS = [{"name": "grpo_cost", "kind": "staleness_cost", "recipe": "grpo", "lag": 8, "expect": "less",
           "smallest_effect": 0.05},
          {"name": "r3_beats_grpo_lag1", "kind": "recipes", "recipe": "grpo_r3", "versus": "grpo", "lag": 1,
           "metric": "fixed", "expect": "greater", "smallest_effect": 0.02}]


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    """Three fabricated grids summarized by analysis.cells.summary: A, a copy of A, and A with grpo_r3's lag-1
    scores 10 points lower (then grpo_r3 no longer beats grpo at lag 1)."""
    root = tmp_path_factory.mktemp("grids")
    original = grid_fixture.scores_of
    folders = {}
    for name, shift in (("a", 0.0), ("copy", 0.0), ("shifted", -0.10)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(grid_fixture, "scores_of", lambda recipe, lag, seed, shift=shift: [
                score + (shift if (recipe, lag) == ("grpo_r3", 1) else 0.0) for score in original(recipe, lag, seed)])
            config = validate({**grid_fixture.make_grid(root / name), "claims": CLAIMS})
        folders[name] = root / name / config["grid"]
        typed = Config.build(config)
        write_summary(folders[name] / "summary.json", summarize(typed, collect(typed, progress=False)))
    return folders


def test_a_grid_agrees_with_its_copy(grids, capsys):
    assert main([str(grids["a"]), str(grids["copy"] / "summary.json"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["agree"] and result["a"] == str(grids["a"] / "summary.json")
    # sat_grpo lag 1: every seed has the same curve in both grids: no spread, no test, no difference
    equal = [r for r in result["cells"] if r["difference"]["method"] == "degenerate"]
    assert {(r["recipe"], r["lag"]) for r in equal} == {grid_fixture.EQUAL_CELL} and not any(r["differs"] for r in equal)
    assert result["tests"] == len(result["cells"]) - len(equal) == 16
    assert [c["a"]["verdict"] for c in result["claims"]] == [c["b"]["verdict"] for c in result["claims"]]


def test_a_grid_with_a_shifted_cell_differs_there_and_flips_its_claim(grids, capsys):
    assert main([str(grids["a"]), str(grids["shifted"])]) == 1
    markdown = capsys.readouterr().out
    assert "cells that differ after Holm over 16: grpo_r3 lag 1 AUC; grpo_r3 lag 1 fixed-step score." in markdown
    assert "claims with another verdict: r3_beats_grpo_lag1 (claimed sign in A, undecided in B)." in markdown
    assert "| grpo_r3 | 1 | AUC | 40.2 [38.1, 42.3] (n 3) | 30.2 [28.1, 32.3] (n 3) | -10.0 [" in markdown
