"""One colour per recipe, chosen, the same in every PNG of the report and every MLflow view that groups runs by recipe.

The colours: CHOSEN, a fixed list taken in the grid's declared recipe order (the grid's first recipe gets the first
colour, ...). Its first four were chosen among MLflow's 29 colours (the only ones its UI draws a group in) as the four
farthest apart in CIELAB seen with normal vision and as simulated for protanopia, deuteranopia and tritanopia (Machado
et al. 2009), none lighter than L* 75 on the white page (tests/support/colour_distance.py measures it); the next four
add the farthest one at a time. A grid of more than 8 recipes reuses them, and the PNGs tell two recipes of one colour
apart by their marker.

MLflow 3's UI colours a group of runs by a hash of the group's id and lets no view choose it (a person's choice lives
in the browser's local storage only): its bundle, mlflow/server/js, names the group of runs grouped by a tag
``<mode>.<key>.<value>`` ("tag.stalebench.series.grpo") and colours it PALETTE[Fletcher-16 sum of the id's UTF-16
units % 29]. So the views (tracking.layout) group by the tag SERIES_TAG, whose value (series_label) is the recipe's
name followed by the fewest spaces and tabs that make that hash land on the recipe's chosen colour (spaces alone
miss some colours for some names): the page, which collapses white space, names the recipe. tests/tracking/test_track_ui.py checks the colours the browser draws.
"""
from __future__ import annotations

import struct

SERIES_TAG = "stalebench.series"  # the tag the views group by (tracking.layout); its value: series_label
# MLflow 3.17's run and group palette (its bundle's RUNS_COLOR_PALETTE), in its order
PALETTE = ("#a6630c", "#c83243", "#b45091", "#8a63bf", "#434a93", "#137dae", "#04867d", "#308613", "#facb66",
           "#1f272d", "#445461", "#5f7281", "#8396a5", "#93320b", "#be501e", "#de7921", "#f2be88", "#115026",
           "#277c43", "#3ba65e", "#8ddda8", "#9e102c", "#c82d4c", "#e65b77", "#f792a6", "#0e538b", "#2272b4",
           "#4299e0", "#8acaff")
# blue, brown, pink, near-black; then red, orange, slate, light blue (the module's docstring)
CHOSEN = ("#2272b4", "#93320b", "#f792a6", "#1f272d", "#c82d4c", "#de7921", "#5f7281", "#4299e0")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # a recipe's marker: by its place in the grid's recipe list
MAX_PADDING = 40  # white space tried after a name: 18 at most for every pair of 15 recipe names and colours


def hashed_colour(text: str) -> str:
    """MLflow's colour of a run or group id: a Fletcher-16 checksum of its UTF-16 code units into PALETTE."""
    low = high = 0
    encoded = text.encode("utf-16-le")
    for unit in struct.unpack(f"<{len(encoded) // 2}H", encoded):  # JavaScript's charCodeAt, one by one
        low = (low + unit) % 255
        high = (high + low) % 255
    return PALETTE[(low | high << 8) % len(PALETTE)]


def recipe_colour(recipe: str, recipes: list[str] | tuple[str, ...]) -> str:
    """The colour of ``recipe`` of a grid whose declared recipes are ``recipes``, in every view and PNG; a tuned
    variant (grid.tuning names it <recipe>.<param>-<value>) has its recipe's."""
    recipes = list(recipes)
    declared = recipe if recipe in recipes else recipe.split(".")[0]
    if declared not in recipes:
        raise ValueError(f"recipe {recipe!r} is none of the grid's recipes {recipes}: it has no colour")
    return CHOSEN[recipes.index(declared) % len(CHOSEN)]


def series_label(recipe: str, recipes: list[str] | tuple[str, ...]) -> str:
    """The SERIES_TAG value of ``recipe``'s runs: its name and the white space that makes MLflow colour its group in
    recipe_colour."""
    colour = recipe_colour(recipe, recipes)
    for padding in range(MAX_PADDING):
        for tabs in range(padding + 1):
            label = recipe + " " * (padding - tabs) + "\t" * tabs
            if hashed_colour(f"tag.{SERIES_TAG}.{label}") == colour:
                return label
    raise ValueError(f"no white space after recipe {recipe!r} up to {MAX_PADDING} characters takes MLflow's colour "
                     f"{colour}: rename the recipe")
