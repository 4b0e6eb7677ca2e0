"""analysis.report.colors: each recipe's colour is chosen (by its place in the grid's recipe list) from MLflow's
palette, colour-blind safe, and the series tag's value makes MLflow's hash land on it (issue 65: two recipes of a
claim got near-identical dark colours from the hash of their names)."""
import pytest

from analysis.report.colors import CHOSEN, PALETTE, SERIES_TAG, hashed_colour, recipe_colour, series_label
from tests.support.colour_distance import closest_pair, distance, lab


def test_the_chosen_colours_are_mlflows_and_far_apart_to_every_eye():
    assert set(CHOSEN) <= set(PALETTE) and len(set(CHOSEN)) == len(CHOSEN)
    assert closest_pair(CHOSEN[:4])[0] > 39  # a 4-recipe grid: every pair, normal and colour-blind vision
    assert closest_pair(CHOSEN)[0] > 14
    assert distance("#434a93", "#445461") < 16  # issue 65's pair (sat_gspo, gspo_mu), which the hash gave
    assert all(lab(colour)[0] <= 75 for colour in CHOSEN)  # none faint on the white page


def test_recipes_take_the_colours_in_the_declared_order_and_mlflow_draws_them_so():
    recipes = ["grpo", "gspo", "gspo_mu", "sat_gspo", "sat_grpo", "grpo_r3", "cispo", "sapo", "tis"]
    assert [recipe_colour(r, recipes) for r in recipes] == [*CHOSEN, CHOSEN[0]]
    assert recipe_colour("sat_grpo.alpha-0.95", ["grpo", "sat_grpo"]) == CHOSEN[1]  # a tuned variant: its recipe's
    for recipe in recipes:
        label = series_label(recipe, recipes)
        assert label.rstrip() == recipe and hashed_colour(f"tag.{SERIES_TAG}.{label}") == recipe_colour(recipe, recipes)
    with pytest.raises(ValueError, match="none of the grid's recipes"):
        recipe_colour("dapo", recipes)


def test_the_hash_mirrors_mlflows():
    # MLflow 3.17's bundle, Fletcher-16 of the group id into its palette: issue 65's colours of the demo's groups
    assert hashed_colour("param.recipe.sat_gspo") == "#434a93" and hashed_colour("param.recipe.gspo_mu") == "#445461"
