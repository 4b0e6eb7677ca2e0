"""Claims against numbers worked by hand: the contrast each claim kind means (its sign), its t
interval and test, and the equivalence (TOST) p at the declared margin. Three seeds, so the Student
t has 2 degrees of freedom, whose distribution function has a closed form,
F(t) = 1/2 + t / (2 sqrt(2 + t^2)): every expected number below is arithmetic, not scipy's."""
import math

import pytest

from analysis.claims import verdicts as claim_rules
from analysis.claims.verdict import Verdict
from analysis.statistics.cell_stats import CellStats
from analysis.statistics.cell_table import CellTable
from analysis.statistics.contrasts import contrast, tost
from grid.claims import Claim, Family

SEEDS = [0, 1, 2]
# per seed: recipe "a" loses 0.10, 0.07, 0.04 from lag 1 to lag 8; "b" loses 0.20, 0.18, 0.16;
# "c" changes by +0.01, -0.01, +0.03
AUC = {("a", 8): [0.30, 0.34, 0.38], ("a", 1): [0.40, 0.41, 0.42],
       ("b", 8): [0.20, 0.22, 0.24], ("b", 1): [0.40, 0.40, 0.40],
       ("c", 8): [0.41, 0.39, 0.43], ("c", 1): [0.40, 0.40, 0.40]}
CELLS = CellTable.of_cells(CellStats(*cell, SEEDS, {"auc": values}) for cell, values in AUC.items())


def t2_cdf(t: float) -> float:
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


T2_975 = math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2))  # F(t) = 0.975 solved: 4.3027


def claim(**fields) -> Claim:
    return Claim.build({"name": "c", "lag": 8, "metric": "auc", "smallest_effect": 0.05, **fields}, reference_lag=1)


def arms(declared: Claim) -> list:
    return [(weight, AUC[recipe, lag], SEEDS) for weight, recipe, lag in declared.cells()]


def test_t2_closed_form_is_the_t_table():
    assert T2_975 == pytest.approx(4.302653, abs=1e-6) and t2_cdf(0) == 0.5


def test_a_cost_difference_is_the_first_recipes_cost_minus_the_seconds():
    """a's cost is smaller than b's: (a8 - a1) - (b8 - b1) = +0.10, +0.11, +0.12 per seed, mean +0.11,
    sd 0.01; the paired t interval 0.11 +- 4.3027 x 0.01 / sqrt(3) and p = 1 - t / sqrt(2 + t^2)."""
    result = contrast(arms(claim(kind="cost_difference", recipe="a", versus="b", expect="greater")))
    se = 0.01 / math.sqrt(3)
    t = 0.11 / se
    assert result.method == "paired-t" and result.n == 3
    assert result.estimate == pytest.approx(0.11, rel=1e-9)
    assert (result.low, result.high) == (pytest.approx(0.11 - T2_975 * se, rel=1e-7),
                                         pytest.approx(0.11 + T2_975 * se, rel=1e-7))
    assert result.p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-6)
    reverse = contrast(arms(claim(kind="cost_difference", recipe="b", versus="a", expect="less")))
    assert reverse.estimate == pytest.approx(-0.11, rel=1e-9)


def test_a_staleness_cost_is_lag_l_minus_lag_1():
    assert contrast(arms(claim(kind="staleness_cost", recipe="a", expect="less"))).estimate == pytest.approx(-0.07)
    assert contrast(arms(claim(kind="recipes", recipe="a", versus="b", expect="greater"))).estimate == \
        pytest.approx(0.34 - 0.22)


@pytest.mark.parametrize("margin", [0.025, 0.05, 0.10])
def test_tost_at_the_margin_by_hand(margin):
    """c's cost: mean 0.01, sd 0.02, se 0.02 / sqrt(3); TOST p = max(1 - F((0.01 + m) / se), F((0.01 - m) / se))."""
    result = contrast(arms(claim(kind="staleness_cost", recipe="c", expect="equivalent")))
    se = 0.02 / math.sqrt(3)
    assert result.estimate == pytest.approx(0.01) and result.se == pytest.approx(se)
    expected = max(1 - t2_cdf((0.01 + margin) / se), t2_cdf((0.01 - margin) / se))
    assert tost(result, margin) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("margin, outcome", [(0.05, "undecided"), (0.10, "negligible")])
def test_an_equivalence_claim_is_read_at_its_own_margin(margin, outcome):
    """c's cost, the family's only claim, read from its 95% interval: 0.01 +- 4.3027 x 0.02 / sqrt(3) =
    [-0.0397, +0.0597]. Inside +-0.10 (negligible), but past +0.05 (undecided)."""
    declared = Claim.build({"name": "c", "lag": 8, "metric": "auc", "smallest_effect": margin,
                            "kind": "staleness_cost", "recipe": "c", "expect": "equivalent"}, reference_lag=1)
    (verdict,) = claim_rules.answer(Family((declared,), steps=20), CELLS)
    row = verdict.row()
    half = T2_975 * 0.02 / math.sqrt(3)
    assert (row["estimate"], row["low"], row["high"]) == (pytest.approx(0.01), pytest.approx(0.01 - half),
                                                          pytest.approx(0.01 + half))
    assert row["low"] == pytest.approx(-0.039683, abs=1e-6) and row["verdict"] == outcome


@pytest.mark.parametrize("low, high, inside", [(-0.04, -0.01, True), (-0.08, -0.01, False)])
def test_an_opposite_outcome_inside_delta_says_so_in_its_own_words(low, high, inside):
    """Issue 64: "opposite" with its interval inside +-delta (0.05) is the other sign and also smaller than
    the smallest effect that matters; the row's words say both, so it is not read as a large reversal."""
    decided = Verdict(claim=claim(kind="recipes", recipe="a", versus="b", expect="greater"), statement="",
                      family_size=1, verdict="opposite", why="", final=True, low=low, high=high, look=1, looks=1,
                      confidence=0.99)
    text = claim_rules.why(decided)
    assert text.startswith("against the claim: the other sign")
    assert ("inside +-delta: smaller than the smallest effect that matters" in text) is inside
