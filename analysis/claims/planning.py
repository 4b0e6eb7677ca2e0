"""Size a grid before paying for it: what the declared design (config ``claims`` and ``seeding``)
is expected to cost and how likely it is to decide each claim, at assumed effects.

    python -m analysis.claims.planning config.yaml --from results/field          # effects measured on a grid
    python -m analysis.claims.planning config.yaml --assume grpo_staleness_cost=-0.29:0.04 ...   # effect:spread

An assumption is a claim's true contrast and the sd of one seed's contrast (fractions of the score,
as smallest_effect; a collapse claim: the two cells' collapse rates, rate_x:rate_y). Without one a
claim is planned at its smallest effect (0 for an equivalence claim) with the spread it must be
given. Each claim is simulated through the whole rule (analysis.statistics.decision: its interval at the
family's level, every look of the schedule); claims are drawn independently, so the expected runs
ignore the correlation of claims that share a cell (benchmarks/bench_verdicts.py simulates it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from analysis.claims.summary_file import read_summary
from analysis.claims.verdict import RateMeasured, ScoreMeasured
from analysis.claims.verdicts import Schedule
from analysis.statistics.decision import simulate_collapse, simulate_contrast
from grid.config import ConfigError, load
from grid.folder import GridDir
from grid.settings import Config


def assumed_effects(grid: Path | None, assume: list) -> dict[str, tuple[float, ...]]:
    """The command line's effects: those a finished grid measured (``--from``: its folder or summary.json),
    then each ``--assume`` over them."""
    assumed = assumptions_from(GridDir(grid).summary_path if grid.is_dir() else grid) if grid else {}
    return {**assumed, **dict(assume)}


def assumptions_from(summary_path: Path) -> dict[str, tuple[float, ...]]:
    """Each claim's measured estimate, spread and seeds (collapse: rates) in a finished grid's summary.json."""
    out = {}
    for verdict in read_summary(summary_path).claims:  # a damaged file is named
        measured, name = verdict.measured, verdict.claim.name
        if isinstance(measured, RateMeasured) and measured.rates:
            out[name] = tuple(measured.rates)
        elif isinstance(measured, ScoreMeasured) and measured.spread is not None and measured.estimate is not None:
            out[name] = (measured.estimate, measured.spread, measured.n)
    return out


def plan(config: Config, assumed: dict[str, tuple[float, float]], replicates: int = 4000) -> dict:
    """Per tested claim: P(each outcome), P(final) and its mean stopping look; for the grid: the
    expected runs under the schedule, the most and fewest it can take, and the tuning runs (config
    ``tuning``: a fixed number, trained before any of them)."""
    cells = {(recipe, lag) for recipe in config.recipes for lag in config.lags}
    tested = [c for c in config.claims if set(c.read_cells()) <= cells]
    schedule = Schedule.build(config.seeding, config.seeds, len(config.claims))  # the declared family
    missing = [c.name for c in tested if c.name not in assumed and c.scale == "rate"]
    if missing:
        raise ValueError(f"no assumption for the collapse claims {missing}: pass --assume NAME=rate_x:rate_y")
    rows, stops = [], {}
    for claim in tested:
        args = (schedule.looks, schedule.levels, claim.smallest_effect, claim.expect)
        if claim.scale == "rate":
            outcomes, stopped = simulate_collapse(*assumed[claim.name], *args, draws=replicates)
        else:
            effect = {"greater": claim.smallest_effect, "less": -claim.smallest_effect, "equivalent": 0.0}
            default = (effect[claim.expect], None)
            estimate, spread = assumed.get(claim.name, default)[:2]
            if spread is None:
                raise ValueError(f"claim {claim.name!r}: no spread assumed; pass --assume {claim.name}=effect:spread "
                                 "or --from a grid that measured it")
            outcomes, stopped = simulate_contrast(estimate, spread, *args, draws=replicates)
        names, counts = np.unique(outcomes, return_counts=True)
        shares = {str(n): float(c / replicates) for n, c in zip(names, counts)}
        stops[claim.name] = stopped
        rows.append({"name": claim.name, "assumed": assumed.get(claim.name), "outcomes": shares,
                     "agree": float(sum(p * p for p in shares.values())),
                     "mean_look": float(stopped.mean() + 1)})
    runs = runs_per_draw(config, tested, stops, schedule.looks)
    # the most: every claim open to the last look, so its cells run every seed and the others the first look's
    to_the_end = {claim.name: np.array([len(schedule.looks) - 1]) for claim in tested}
    most = runs_per_draw(config, tested, to_the_end, schedule.looks)
    tuning = config.tuning
    return {"looks": list(schedule.looks), "levels": list(schedule.levels), "boundary": schedule.boundary,
            "claims": rows, "expected_runs": float(runs.mean()), "fewest_runs": int(len(cells) * schedule.looks[0]),
            "most_runs": int(most[0]), "tuning_runs": len(tuning.runs()) if tuning else 0}


def runs_per_draw(config: Config, tested: list, stops: dict[str, np.ndarray], looks) -> np.ndarray:
    """The runs of each simulated grid: each cell runs the seeds of the last look any of the ``tested``
    claims reading it reached (``stops``: each claim's look index per draw); a cell no claim reads, the first look's."""
    cells, looks = [(r, lag) for r in config.recipes for lag in config.lags], np.array(looks)
    draws = len(next(iter(stops.values()))) if stops else 1
    return np.sum([looks[np.max([stops[c.name] for c in tested if cell in c.read_cells()], axis=0)]
                   if any(cell in c.read_cells() for c in tested) else np.full(draws, looks[0])
                   for cell in cells], axis=0)


def render(result: dict) -> str:
    lines = [f"looks {result['looks']} (levels {', '.join(f'{v:.4g}' for v in result['levels'])}"
             f"{', ' + result['boundary'] if result['boundary'] else ''}): expected runs "
             f"{result['expected_runs']:.1f} (fewest {result['fewest_runs']}, most {result['most_runs']})"
             + (f", after {result['tuning_runs']} tuning runs" if result["tuning_runs"] else ""), "",
             "| claim | assumed | outcomes | P(two runs agree) | mean look |", "|---|---|---|---|---|"]
    for row in result["claims"]:
        shares = ", ".join(f"{n} {p:.2f}" for n, p in sorted(row["outcomes"].items(), key=lambda x: -x[1]))
        lines.append(f"| {row['name']} | {row['assumed']} | {shares} | {row['agree']:.2f} | {row['mean_look']:.2f} |")
    return "\n".join(lines)


def parse_assumption(text: str) -> tuple[str, tuple[float, ...]]:
    """NAME=effect:spread, or NAME=effect:spread:n (the seeds it was measured on: analysis.claims.design_search)."""
    try:
        name, values = text.split("=", 1)
        numbers = tuple(float(v) for v in values.split(":"))
        if len(numbers) not in (2, 3):
            raise ValueError
        return name, numbers[:2] + tuple(int(v) for v in numbers[2:])
    except ValueError:
        raise argparse.ArgumentTypeError(f"--assume {text!r}: expected NAME=effect:spread or NAME=effect:spread:n") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.claims.planning", description=__doc__.split("\n")[0])
    parser.add_argument("config", help="a workflow config (config.yaml or a preset)")
    parser.add_argument("--from", dest="grid", type=Path, help="a finished grid (its folder or summary.json)")
    parser.add_argument("--assume", type=parse_assumption, action="append", default=[], help="NAME=effect:spread")
    parser.add_argument("--replicates", type=int, default=4000)
    parser.add_argument("-C", "--set", action="append", default=[], metavar="KEY=JSON",
                        help="override a config key, as snakemake -C (e.g. 'seeding={\"looks\": [3, 5]}')")
    args = parser.parse_args(argv)
    try:
        config = load(args.config, {key: json.loads(value) for key, value in (s.split("=", 1) for s in args.set)})
        print(render(plan(Config.build(config), assumed_effects(args.grid, args.assume), args.replicates)))
    except (ConfigError, ValueError, OSError) as error:
        print(f"analysis.claims.planning: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
