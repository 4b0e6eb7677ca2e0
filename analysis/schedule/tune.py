"""The equal tuning budget's pick (config ``tuning``; grid.tuning; docs/statistics.md, "Equal
tuning budget"): each recipe's value, from its candidates' runs on the tuning seeds.

The rule, declared before any run: a candidate's score is the mean of its runs' ``tuning.metric``
(AUC by default) over the tuning seeds and the selection lags (every run of the budget weighs the
same); the highest score wins, and a tie (equal within TIE, float rounding) goes to the candidate
listed first. The workflow runs the pick once the tuning runs are scored (``python -m
analysis.schedule.tune``, a Snakemake checkpoint: its output names the confirmation runs, and the DAG grows
from it); aggregation replays it from the same runs (:func:`confirmation_view`) and reports the picked
variants' confirmation seeds only: a tuning score is the pick's input (tuning.json), never a result.

    python -m analysis.schedule.tune --grid <results_dir>/<grid> --out <the grid's pick file>
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from analysis.cells.summary import collect
from grid.loader import load_grid
from grid.settings import Config
from harness.cli import run_stage
from harness.io import write_json_atomic

TIE = 1e-12  # two means of the same scores summed in another order differ by rounding only


def pick(scores: list[tuple[object, float]]):
    """The value of the highest score among (value, score) in declared order; the first of a tie.
    A non-finite score is refused: every candidate's runs must be scored."""
    bad = [value for value, score in scores if not math.isfinite(score)]
    if bad:
        raise ValueError(f"candidate(s) {bad} have no finite tuning score")
    best = max(score for _, score in scores)
    return next(value for value, score in scores if score >= best - TIE)


def tuning_scores(config: Config, runs) -> dict[str, list[tuple[object, float]]]:
    """recipe -> (value, mean score over its tuning runs) in declared order, from ``runs``
    (analysis.cells.summary.RunResult of the tuning runs); a candidate without every one of its runs is refused."""
    tuning, by_run = config.tuning, {(run.recipe, run.lag, run.seed): run for run in runs}
    scores = {}
    for recipe, candidates in tuning.candidates.items():
        scores[recipe] = []
        for value in candidates.values:
            keys = [(candidates.variant(value), lag, seed) for lag in tuning.lags for seed in tuning.seeds]
            missing = [key for key in keys if key not in by_run]
            if missing:
                raise ValueError(f"tuning run(s) {missing} of {recipe!r} are missing: the pick needs every run")
            values = [getattr(by_run[key].summary, tuning.metric) for key in keys]
            scores[recipe].append((value, sum(values) / len(values)))
    return scores


def selection(config: Config, progress: bool = False) -> dict:
    """What the pick decided, from the grid's tuning runs (tuning.json): per recipe the parameter,
    the candidates with their tuning scores (the pick's input), the picked value and its variant;
    and the confirmation runs (the picked variants at every lag and seed of the grid: under a seed schedule,
    every run its looks may ask for; the workflow trains those of each look, analysis.schedule.looks)."""
    tuning = config.tuning
    scores = tuning_scores(config, collect(config, progress=progress, which=tuning.runs()))
    recipes = {}
    for recipe, candidates in tuning.candidates.items():
        value = pick(scores[recipe])
        recipes[recipe] = {"param": list(candidates.params), "values": list(candidates.values),
                           "tuning_scores": [score for _, score in scores[recipe]],
                           "picked": value, "variant": candidates.variant(value)}
    return {"metric": tuning.metric, "lags": list(tuning.lags), "seeds": list(tuning.seeds),
            "rule": "highest mean over the tuning seeds and lags; a tie goes to the candidate listed first",
            "recipes": recipes,
            "confirmation_runs": [[entry["variant"], lag, seed] for entry in recipes.values()
                                  for lag in config.lags for seed in config.seeds]}


def confirmation_view(config: Config) -> tuple[Config, dict | None]:
    """The grid aggregation reads: with a tuning section, the confirmation grid of the picked
    variants (Config.confirmation) and the pick without its tuning scores; otherwise ``config`` and None."""
    if config.tuning is None:
        return config, None
    picked = selection(config)
    view = config.confirmation({r: e["picked"] for r, e in picked["recipes"].items()})
    reported = {key: value for key, value in picked.items() if key != "confirmation_runs"}
    reported["recipes"] = {recipe: {key: value for key, value in entry.items() if key != "tuning_scores"}
                           for recipe, entry in picked["recipes"].items()}
    return view, reported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.schedule.tune", description=__doc__.split("\n")[0])
    parser.add_argument("--grid", required=True, help="the grid folder, <results_dir>/<grid> (its config.json)")
    parser.add_argument("--out", required=True, help="the JSON file to write: the grid folder's tuning pick (GridDir.tuning_path)")
    args = parser.parse_args(argv)
    config = load_grid(parser, args.grid)
    if config.tuning is None:
        parser.error("the config declares no tuning section")

    def work() -> dict:
        result = selection(config)
        write_json_atomic(Path(args.out), result)
        return result

    return run_stage("analysis.schedule.tune", work, lambda result, seconds: (
        "picked " + ", ".join(f"{recipe}: {entry['picked']}" for recipe, entry in result["recipes"].items())
        + f" ({seconds:.1f} s)"))


if __name__ == "__main__":
    sys.exit(main())
