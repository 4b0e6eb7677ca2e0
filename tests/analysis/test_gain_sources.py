"""Where a recipe's gain comes from (analysis.claims.gain_sources): its two contrasts worked by hand, the source
from their outcomes, the sentence, and the config checks of gain_sources."""
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from analysis.claims.gain_sources import gain_sources, source
from analysis.report.sections import sentences
from analysis.statistics.cell_stats import CellStats
from analysis.statistics.cell_table import CellTable
from grid.config import ConfigError, load
from grid.settings import GainSources

SECTION = {"baseline": {"without_mismatch": "g32", "with_mismatch": "g16"},
           "recipes": {"x": {"without_mismatch": "x32", "with_mismatch": "x16"}}, "smallest_effect": 0.05}
SEEDS = [0, 1, 2, 3]
# AUC per seed: x's staleness cost is 0.20 smaller than g's without mismatch (a staleness correction);
# at lag 0 x's benefit over g is the same with and without the mismatch (0.01 apart at most: no mismatch
# correction)
AUC = {("g32", 0): [0.60, 0.62, 0.58, 0.61], ("g32", 8): [0.30, 0.31, 0.29, 0.30],
       ("x32", 0): [0.61, 0.62, 0.59, 0.61], ("x32", 8): [0.51, 0.50, 0.50, 0.52],
       ("g16", 0): [0.55, 0.57, 0.53, 0.56], ("g16", 8): [0.25, 0.26, 0.24, 0.25],
       ("x16", 0): [0.56, 0.58, 0.53, 0.56], ("x16", 8): [0.45, 0.47, 0.44, 0.46]}


def grid(claims=()) -> SimpleNamespace:
    """What gain_sources reads of a grid.settings.Config: the lags, the step budget, the section and
    the declared claims."""
    return SimpleNamespace(lags=(0, 8), steps=200, gain_sources=GainSources.build(SECTION), claims=tuple(claims))


def cells(left_out: str | None = None) -> CellTable:
    return CellTable.of_cells(CellStats(recipe, lag, SEEDS, {"auc": values})
                              for (recipe, lag), values in AUC.items() if recipe != left_out)


def test_the_two_parts_by_hand():
    found = gain_sources(grid(), cells())
    (row,) = found["recipes"]
    a = {cell: np.array(values) for cell, values in AUC.items()}
    staleness = (a["x32", 8] - a["x32", 0]) - (a["g32", 8] - a["g32", 0])
    mismatch = (a["x16", 0] - a["g16", 0]) - (a["x32", 0] - a["g32", 0])
    for part, per_seed in (("staleness", staleness), ("mismatch", mismatch)):
        half = stats.t.ppf(1 - 0.05 / 2, 3) * np.std(per_seed, ddof=1) / 2  # no claims: the level is 0.05
        assert row[part]["estimate"] == pytest.approx(per_seed.mean())
        assert (row[part]["low"], row[part]["high"]) == pytest.approx((per_seed.mean() - half, per_seed.mean() + half))
    assert row["staleness"]["outcome"] == "exceeds" and row["mismatch"]["outcome"] == "negligible"
    assert row["source"] == "staleness"
    (text,) = sentences(found)
    assert text.startswith("`x`: **staleness**. Staleness part (without the sampler's mismatch, its staleness cost "
                           "at lag 8 minus `g32`'s; positive: a smaller cost): "
                           f"{staleness.mean() * 100:+.1f} [")
    assert "(exceeds, n 4)" in text and "(negligible, n 4)" in text


def test_the_level_is_the_claims_family_level():
    """Three claims declared (one of them not tested in this grid): each part's interval at 0.05 / 3, as theirs."""
    found = gain_sources(grid(claims=("a", "b", "c")), cells())
    assert found["recipes"][0]["confidence"] == pytest.approx(1 - 0.05 / 3)


def test_a_recipe_whose_arm_is_not_in_the_grid_is_not_tested():
    found = gain_sources(grid(), cells(left_out="x16"))
    assert found["recipes"] == [{"recipe": "x", "source": "not tested in this grid"}]
    assert sentences(found) == ["`x`: not tested in this grid (an arm's cell is missing)."]


@pytest.mark.parametrize("staleness, mismatch, expected", [
    ("exceeds", "claimed sign", "both"), ("claimed sign", "negligible", "staleness"),
    ("opposite", "exceeds", "mismatch"), ("below effect", "negligible", "neither"),
    ("undecided", "negligible", "undecided"), ("exceeds", "undecided", "staleness (mismatch undecided)"),
    ("nonzero", "claimed sign", "mismatch (staleness undecided)"), ("undecided", "undecided", "undecided"),
])
def test_the_source_from_the_outcomes(staleness, mismatch, expected):
    assert source(staleness, mismatch) == expected


@pytest.mark.parametrize("change, message", [
    ({"lags": [1, 8]}, "config key 'gain_sources': reads lag 0 (no staleness), which lags [1, 8] does not have"),
    ({"gain_sources": {**SECTION, "baseline": {"without_mismatch": "nope", "with_mismatch": "grpo"}}},
     "config key 'gain_sources.baseline.without_mismatch': unknown recipe 'nope'"),
    ({"gain_sources": {**SECTION, "recipes": {"x": {"without_mismatch": "grpo"}}}},
     "config key 'gain_sources.recipes.x.with_mismatch': missing (required)"),
])
def test_gain_sources_is_checked_naming_the_key(change, message):
    good = {"baseline": {"without_mismatch": "grpo", "with_mismatch": "gspo"},
            "recipes": {"x": {"without_mismatch": "gspo_mu", "with_mismatch": "sat_gspo"}}, "smallest_effect": 0.05}
    with pytest.raises(ConfigError) as error:
        load("config.yaml", {"lags": [0, 8], "gain_sources": good, **change})
    assert message in str(error.value)


def test_the_sources_preset_declares_its_recipes_arms():
    config = load("workflow/presets/sources.yaml")
    arms = {arm for recipe in config["gain_sources"]["recipes"].values() for arm in recipe.values()}
    assert arms <= set(config["recipes"]) and len(arms) == 12
