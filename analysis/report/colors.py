"""One colour per recipe, the same in every PNG of the report and every MLflow view that groups runs by recipe.

MLflow 3's UI colours a group of runs by a hash of the group's id (its bundle, mlflow/server/js: the group id
is ``<mode>.<key>.<value>`` per grouping key, "param.recipe.grpo" for runs grouped by the param ``recipe``; the
colour is a Fletcher-16 sum of the id's characters, modulo its 29-colour palette). The views of tracking.layout
group by the param RECIPE_PARAM alone (the lag is each view's filter), so that this module's recipe_colour is the
colour of a recipe there; the PNGs (analysis.report.plots) draw each recipe in it. MLflow lets no view set a
group's colour (a person's choice lives in the browser's local storage only), hence the hash is mirrored here,
and tests/tracking/test_track_ui.py checks it against the colours the browser draws. Two recipes may share a
colour (29 colours); the PNGs then tell them apart by their marker.
"""
from __future__ import annotations

import struct

RECIPE_PARAM = "recipe"  # the param the views group by (tracking.layout)
# MLflow 3.17's run and group palette (its bundle's RUNS_COLOR_PALETTE), in its order
PALETTE = ("#a6630c", "#c83243", "#b45091", "#8a63bf", "#434a93", "#137dae", "#04867d", "#308613", "#facb66",
           "#1f272d", "#445461", "#5f7281", "#8396a5", "#93320b", "#be501e", "#de7921", "#f2be88", "#115026",
           "#277c43", "#3ba65e", "#8ddda8", "#9e102c", "#c82d4c", "#e65b77", "#f792a6", "#0e538b", "#2272b4",
           "#4299e0", "#8acaff")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # a recipe's marker: by its place in the grid's recipe list


def group_id(recipe: str) -> str:
    """The id MLflow's UI gives the group of a recipe's runs in a view grouped by RECIPE_PARAM."""
    return f"param.{RECIPE_PARAM}.{recipe}"


def hashed_colour(text: str) -> str:
    """MLflow's colour of a run or group id: a Fletcher-16 checksum of its UTF-16 code units into PALETTE."""
    low = high = 0
    encoded = text.encode("utf-16-le")
    for unit in struct.unpack(f"<{len(encoded) // 2}H", encoded):  # JavaScript's charCodeAt, one by one
        low = (low + unit) % 255
        high = (high + low) % 255
    return PALETTE[(low | high << 8) % len(PALETTE)]


def recipe_colour(recipe: str) -> str:
    """The colour of ``recipe`` in every view and PNG (the module's docstring)."""
    return hashed_colour(group_id(recipe))
