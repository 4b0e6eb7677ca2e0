"""What a run shows in MLflow: its flat params, metric names and units, tags, step timestamps.

Params (seed runs): ``recipe, loss, lag, lag_mode, seed, engine, preset, steps, eval_every,
routing_replay, tis``; the stabilizer's parameters with their defaults as ``loss.<name>``; the
engine's resolved hyper-parameters under their own names (``lr``, ``width``...; ``engine.<name>``
where a name is taken above); the evaluation settings as ``eval.<name>`` and each task's problem
count as ``eval.<task>.problems``. Summary runs carry the params their seeds share.

One name and one unit per quantity: a seed run's ``fixed`` (its fixed-step score) and a summary
run's ``fixed`` (the mean over its seeds, with ``fixed/low`` and ``fixed/high``) are the same
quantity. Scores — the eval curves, fixed, best, selected, auc, and any interval, standard error
(``/se``), spread (``/spread``) or difference of them — are in PERCENT (avg@k x 100), as in table.md;
probabilities, p-values, |d| statistics, collapse (0/1 per seed, the rate k/n per cell) and counts keep
their natural scale.
"""
from __future__ import annotations

import hashlib
import json
import math
import re

from analysis.cells.summary import SCORES
from analysis.claims.verdict import Verdict
from analysis.report.colors import SERIES_TAG
from analysis.report.dynamics import BAND
from analysis.statistics.cell_stats import CellStats, Stat
from harness.run_config import PinnedRun
from tracking.store import KIND, SEED_RUNS_FILTER

PERCENT = 100.0
EVAL_CURVE_KEYS = ("score", "pass_at_k", "maj_at_k")  # all scores: logged in percent
# summary.json cell keys that are not aggregate numbers: identity (params), per-seed values (on the
# seed runs), the published numbers (tags), the per-step curve (step metrics: curve_metrics)
CELL_SKIP = ("recipe", "lag", "seeds", "run_keys", "per_seed", "reference", "curve")
ALIASES = {"collapse": "collapsed"}  # the summary's section -> the seed runs' name for the quantity
PROBABILITY_SECTIONS = ("improvement",)  # P(improvement): a probability even where it names a score
SCORE_PARTS = ("estimate", "low", "high", "se", "spread")  # of a score (or a difference of scores): all in percent


def param_text(value) -> str:
    """A param value as MLflow stores it: JSON for lists, mappings and null; at most 6000 chars."""
    text = json.dumps(value) if isinstance(value, (list, dict)) or value is None else str(value)
    return text[:6000]


def flatten(obj, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; an empty mapping or a non-mapping is a leaf."""
    if isinstance(obj, dict) and obj:
        out = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: obj}


def cell_params(run: PinnedRun) -> dict[str, str]:
    """The params every seed of a cell shares (no seed)."""
    recipe = run.recipe
    return {key: param_text(value) for key, value in {
        "recipe": recipe.name, "loss": recipe.loss, "lag": run.lag, "lag_mode": run.lag_mode,
        "engine": run.engine, "preset": run.engine_params.get("preset"), "steps": run.steps,
        "eval_every": run.eval_every, "routing_replay": recipe.routing_replay, "tis": recipe.tis}.items()}


def run_params(run: PinnedRun, eval_settings: dict, problems: dict[str, int]) -> dict[str, str]:
    """A seed run's flat params (module docstring); ``problems``: task -> problem count, as known."""
    params = {**cell_params(run), "seed": param_text(run.seed)}
    # The run config is already resolved (grid.expand.resolve_run_config, what the run key hashes):
    # every stabilizer parameter with its default, the engine preset expanded to its values.
    params.update({f"loss.{k}": param_text(v) for k, v in run.recipe.params.items()})
    for key, value in run.engine_params.items():
        if key == "preset":
            continue  # a core param already
        params[f"engine.{key}" if key in params or key.startswith(("loss.", "eval.")) else key] = param_text(value)
    params.update({f"eval.{k}": param_text(v) for k, v in flatten(eval_settings).items()})
    params.update({f"eval.{task}.problems": str(n) for task, n in problems.items()})
    return params


def provenance_tags(provenance: dict) -> dict[str, str]:
    """provenance.json's fields as ``prov.<field>`` tags (values cut to MLflow's 5000 chars)."""
    return {f"prov.{k}": param_text(v)[:5000] for k, v in flatten(provenance).items()}


def percent(fraction: float) -> float:
    """A fraction in percent, rounded at 1e-10 so that 0.4074 shows as 40.74, not 40.739999999999995."""
    return round(fraction * PERCENT, 10)


def number(value) -> float | None:
    """A JSON number (or bool) as a float for MLflow; anything else None (not logged)."""
    return float(value) if isinstance(value, (bool, int, float)) else None


def _is_score(parts: list[str]) -> bool:
    """A leaf is a score (percent) when it is the estimate, an interval bound, the standard error or the
    spread of a score metric (or of a difference of scores) —
    not a probability, a p-value or a count about it (e.g. seeds needed)."""
    if parts[0] in PROBABILITY_SECTIONS:
        return False
    return parts[-1] in SCORE_PARTS and any(name in SCORES for name in parts[:-1])


def metric_name(parts: list[str]) -> str:
    """summary.json path -> metric name: stats/<m>/estimate -> <m>; stats/<m>/low -> <m>/low;
    collapse/estimate -> collapsed; improvement/fixed/estimate -> improvement/fixed."""
    parts = parts[1:] if parts[0] == "stats" else list(parts)
    parts[0] = ALIASES.get(parts[0], parts[0])
    if len(parts) > 1 and parts[-1] == "estimate":
        parts = parts[:-1]
    return "/".join(parts)


def cell_values(cell: CellStats) -> tuple[dict[str, float], dict[str, str]]:
    """Every aggregate number of a summary.json cell as a metric (scores in percent), every string
    (e.g. an interval's method) as a tag, the published reference numbers as ``paper.*`` tags.
    Generic: a key summary.json gains appears without a change here."""
    metrics, tags = {}, {}

    def walk(value, parts):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, [*parts, str(key)])
        elif isinstance(value, str):
            tags[metric_name(parts)] = value
        elif number(value) is not None:
            metrics[metric_name(parts)] = percent(number(value)) if _is_score(parts) else number(value)
        # lists (per-seed values live on the seed runs) and nulls are not numbers of the cell

    for section, value in cell.row().items():
        if section not in CELL_SKIP:
            walk(value, [section])
    tags.update({f"paper.{k}": param_text(v) for k, v in (cell.reference or {}).items()})
    return metrics, tags


def seed_values(per_seed: dict) -> dict[str, float]:
    """One seed's numbers from a cell's per_seed lists (already indexed), named as the cell's."""
    return {metric_name([key]): percent(number(value)) if key in SCORES else number(value)
            for key, value in per_seed.items() if number(value) is not None}


def step_times_ms(rows: list[dict], start_ms: int) -> dict[int, int]:
    """step -> the time the step's row was produced (its ``time`` field, unix seconds), in ms.
    Rows written before that field existed: the run's start + step milliseconds — monotonic in
    the step, not wall time (the step order is right, a wall-time axis is not)."""
    return {int(row["step"]): int(row["time"] * 1000) if number(row.get("time")) is not None
            and math.isfinite(row["time"]) else start_ms + int(row["step"]) for row in rows}


def eval_metrics(rows: list[dict]) -> list[tuple[int, str, float]]:
    """(step, key, value in percent) of an eval file's curve keys."""
    return [(int(row["step"]), key, percent(number(row[key]))) for row in rows
            for key in EVAL_CURVE_KEYS if number(row.get(key)) is not None]


def curve_metrics(task: str, curve: list[Stat], time_ms: int, part: str = "estimate") -> list:
    """One line of a cell's per-step test-score curve (summary.json's cell["curve"]) as step metrics in
    percent, named eval/<task>/score as on the seed runs: ``part`` "estimate" (the seed mean, on the
    cell's summary run and its mean run of the comparison) or a bound of its 95% interval, "low" or "high"
    (on the cell's band runs of the comparison, BAND_PARTS); a step without that bound (fewer than 2 seeds)
    is left out."""
    from mlflow.entities import Metric
    return [Metric(f"eval/{task}/score", percent(getattr(point, part)), time_ms, int(point.step))
            for point in curve if number(getattr(point, part)) is not None]


def curve_digest(curve: list[Stat], part: str) -> str:
    """What a summary run's curve ``part`` was last logged from (its tag): the curve's rows as summary.json has them."""
    return hashlib.sha256(json.dumps([[point.row() for point in curve], part], sort_keys=True).encode()).hexdigest()[:16]


BAND_PARTS = ("low", "high")  # a cell's band runs, beside its mean run (tracking.runs.comparison_runs)


def staleness_cost_metric(claims: list[Verdict]) -> str:
    """The score whose staleness cost the comparison charts: the staleness claims' metric (AUC by default)."""
    return next((c.claim.metric for c in claims if c.claim.is_cost), "auc")


# Grouped by the recipe alone (its series tag), the lag being each view's filter: MLflow colours a group by a hash of
# its id, which holds the tag's value, chosen to give each recipe its colour of analysis.report.colors, in the view of
# every lag, the seed runs' and the comparison's alike, and in the PNGs.
BY_RECIPE = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": SERIES_TAG}]}
# The UI names a line chart's x axis (Step) but draws no y-axis title, and its runs page ignores a chart's
# displayName (MLflow 3.17 passes useMetricDisplayName false there): a chart's section title names its y axis, first,
# where the UI cuts a long title
Y_SCORE = "y: score %"  # the chart's own title names the task (eval/<task>/score); a title shows ~26 characters


def seed_runs_view(tasks: tuple[str, ...], lag: int) -> dict:
    """The seed runs' shared view at one lag (tracking.store.ui_link): every seed run, grouped by recipe, so that
    each chart draws per recipe the mean of its seeds over the band from their minimum to their maximum (MLflow's
    grouped values), a chart per scored task's test score; the filter names the lag and a recipe clause to edit
    (``params.recipe LIKE '%'``: every recipe; ``= 'grpo'`` one), each group's eye in the run list hides a recipe."""
    sections = [_section(f"stalebench-seeds-{task}", f"{Y_SCORE}, band {BAND}", 480) for task in tasks]
    return _grouped_view(f"{SEED_RUNS_FILTER} AND params.lag = '{lag}' AND params.recipe LIKE '%'", sections,
                         [_chart("LINE", section["uuid"], f"eval/{task}/score") for section, task in zip(sections, tasks)])


def dynamics_view(groups: list[tuple[str, list[str]]], lag: int) -> dict:
    """The training dynamics' shared view at one lag (tracking.store.dynamics_link): the seed runs grouped by recipe,
    a section per group of analysis.report.dynamics (clip fraction, ratio spread, entropy, reward, off-policy
    diagnostics, response length) with a chart per training metric the runs log (``groups``, dynamics_keys'), each
    recipe's mean over its seeds over the band from their minimum to their maximum (the band's method in the title,
    as on dynamics.png)."""
    sections, charts = [], []
    for index, (name, keys) in enumerate(groups):
        # one chart a row: at 1440 px beside the UI's assistant, three a row cut every title and legend; no points
        # (a training metric has a value at every step: points drew slowly and hid the lines)
        section = _section(f"stalebench-dynamics-{index}", f"{name}, band {BAND}", 320)
        sections.append(section)
        charts += [{**_chart("LINE", section["uuid"], f"train/{key}"), "displayPoints": False,
                    "uuid": f"{section['uuid']}-{key.replace('/', '-')}"} for key in keys]
    return _grouped_view(f"{SEED_RUNS_FILTER} AND params.lag = '{lag}'", sections, charts)


def _grouped_view(search: str, sections: list[dict], charts: list[dict]) -> dict:
    """A shared view of ``search``'s runs grouped by recipe (BY_RECIPE), drawing only ``charts``: every run listed
    by name and drawn (the UI draws only the first 10 runs of a view that does not say SHOW_ALL)."""
    return {"searchFilter": search, "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
            "runsHiddenMode": "SHOW_ALL", "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
            # the UI adds a generated chart for every other metric of the runs: the filter keeps them out
            "chartsSearchFilter": "^(" + "|".join(re.escape(c["metricKey"]) for c in charts) + ")$",
            "compareRunSections": sections, "compareRunCharts": charts, "isAccordionReordered": True,
            "groupBy": BY_RECIPE}


def _section(uuid: str, name: str, height: int) -> dict:
    """A chart section of a view, one chart a row (the UI's default: three small cards, legends cut)."""
    return {"uuid": uuid, "name": name, "display": True, "isReordered": True, "deleted": False,
            "isGenerated": False, "columns": 1, "cardHeight": height}


def _chart(kind: str, section: str, metric: str) -> dict:
    """A chart card of a view: every shown run (or group) drawn (the card's own default: 10)."""
    chart = {"uuid": f"{section}-chart", "type": kind, "metricSectionId": section, "deleted": False,
             "isGenerated": False, "metricKey": metric, "runsCountToCompare": 1000}
    if kind == "LINE":
        chart.update({"selectedMetricKeys": [metric], "xAxisKey": "step", "scaleType": "linear",
                      "lineSmoothness": 0, "displayPoints": True})
    return chart


def intervals_view(keys: list[str]) -> dict:
    """The shared view of the intervals' charts (tracking.store.intervals_link): the comparison experiment's run of
    kind figure (tracking.runs.Tracker.sync_intervals), an image chart per image key, two a row in one section,
    each image naming its axes. The run list hidden (one run, no result), so that at 1440x900 beside the UI's
    assistant each card draws its image ~345 px wide (analysis.report.interval_plots.WIDTH: its text ~10 px); the
    height holds that square image, its run's name and the step slider."""
    section = {**_section("stalebench-intervals", "Intervals: each recipe's staleness cost per lag (95%), each claim's "
                          "contrast (its level); the axes named in each chart", 520), "columns": 2}
    cards = [{"uuid": f"stalebench-{key.replace('/', '-')}-chart", "type": "IMAGE", "metricSectionId": section["uuid"],
              "deleted": False, "isGenerated": False, "imageKeys": [key], "step": 0} for key in keys]
    return {"searchFilter": f"tags.\"{KIND}\" = 'figure'", "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
            "runsHiddenMode": "SHOW_ALL", "runListHidden": True, "compareRunSections": [section],
            "compareRunCharts": cards, "isAccordionReordered": True}


def comparison_view(task: str, lag: int, band: str, labels: list[str]) -> dict:
    """A shared view of the comparison experiment at one lag (tracking.store.comparison_link): its cells' mean
    and band runs (tracking.runs.comparison_runs), grouped by recipe (the view holds one lag) with the groups'
    values in the charts, so that the test-score chart draws one line per recipe, the average of its mean,
    low and high runs (the mean: the interval is symmetric), over the band from their minimum to their maximum
    (the 95% interval; ``band`` names its method, in the chart's section title). Every group (``labels``: the
    cells' series labels, analysis.report.colors.series_label) folded in the run list, which so names the recipes
    and no band run. The staleness costs with their
    intervals are the intervals' charts (intervals_view): MLflow's bar chart draws no interval."""
    title = f"{Y_SCORE}, 95% {band}"  # short: the UI cuts a section title past ~26 characters at 1440 px
    view = _grouped_view(f"params.lag = '{lag}'", [_section("stalebench-score", title, 560)],
                         [_chart("LINE", "stalebench-score", f"eval/{task}/score")])
    return {**view, "groupsExpanded": {f"tag.{SERIES_TAG}.{label}": False for label in labels}}
