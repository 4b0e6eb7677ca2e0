"""Does a drop in the effective sample size precede collapse? The lead time of each collapsed run.

    python -m studies.early_warning --grid <results_dir>/<grid> [--out FILE.md]

JSON is the checked workflow config (as the aggregate rule passes it, or a file path). For every run
of the grid: its collapse step (analysis.cells.curves, the harness's rule) and its ESS drop step, the
first step s > BASELINE_STEPS[1] whose trailing WINDOW-step mean of `offpolicy/ess` is below
DROP_FRACTION x the run's median ESS over steps BASELINE_STEPS (after a lag of up to 10 has
ramped up: the first batches all come from the base model). Lead time = collapse step - drop step
(positive: the drop came first). A drop in a run that did not collapse is a false alarm. The rule
was fixed before the field study's ESS was read; collapse steps are known only to the evaluation
interval, so a lead time is exact to eval_every steps.

A lead time means something only if the drop is rarer in runs that did not collapse: read the
false alarms beside it. In the field study (docs/findings.md, "does a drop in ESS precede
collapse?") it was not: at lag 8 the drop came in 21/35 collapsed and 36/65 calm runs (Fisher's
exact p = 0.68), no discrimination.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from analysis.cells.curves import read_run
from grid.loader import load_grid
from grid.settings import Config
from harness.cli import run_stage
from harness.io import write_text_atomic

BASELINE_STEPS = (11, 30)
WINDOW = 10
DROP_FRACTION = 0.5
ESS = "offpolicy/ess"


def ess_drop_step(rows: list[dict]) -> int | None:
    """The first step after the baseline window whose trailing mean ESS is below DROP_FRACTION x
    the baseline median; None if it never drops (or the run is too short to have a baseline)."""
    ess = {int(row["step"]): float(row[ESS]) for row in rows if ESS in row}
    first, last = BASELINE_STEPS
    baseline = [ess[step] for step in range(first, last + 1) if step in ess]
    if not baseline:
        return None
    threshold = DROP_FRACTION * statistics.median(baseline)
    for step in sorted(s for s in ess if s > last):
        window = [ess[s] for s in range(step - WINDOW + 1, step + 1) if s in ess]
        if statistics.fmean(window) < threshold:
            return step
    return None


def run_leads(config: Config) -> list[dict]:
    """Per run: recipe, lag, seed, collapsed, collapse step, ESS drop step, lead time (or None)."""
    out = []
    for recipe, lag, seed in config.grid_runs:
        summary, _, _, train = read_run(config.folder.run(recipe, lag, seed), config)
        drop = ess_drop_step(train)
        lead = summary.collapse_step - drop if summary.collapsed and drop is not None else None
        out.append({"recipe": recipe, "lag": lag, "seed": seed, "collapsed": summary.collapsed,
                    "collapse_step": summary.collapse_step, "drop_step": drop, "lead": lead})
    return out


def table(leads: list[dict]) -> str:
    """Markdown: per recipe and lag, collapses with an earlier drop, their lead times, false alarms."""
    cells = defaultdict(list)
    for row in leads:
        cells[row["recipe"], row["lag"]].append(row)
    lines = [f"ESS drop: trailing {WINDOW}-step mean below {DROP_FRACTION} x the median of steps "
             f"{BASELINE_STEPS[0]}-{BASELINE_STEPS[1]}. Lead = collapse step - drop step.", "",
             "| recipe | lag | collapsed | drop before collapse | lead times (steps) | drop without collapse |",
             "|---|---|---|---|---|---|"]
    for (recipe, lag), rows in cells.items():
        collapsed = [r for r in rows if r["collapsed"]]
        warned = [r for r in collapsed if r["lead"] is not None and r["lead"] > 0]
        calm = [r for r in rows if not r["collapsed"]]
        alarms = [r for r in calm if r["drop_step"] is not None]
        leads_text = ", ".join(str(r["lead"]) for r in collapsed if r["lead"] is not None) or "-"
        lines.append(f"| {recipe} | {lag} | {len(collapsed)}/{len(rows)} | {len(warned)}/{len(collapsed)} | "
                     f"{leads_text} | {len(alarms)}/{len(calm)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.early_warning", description=__doc__.split("\n")[0])
    parser.add_argument("--grid", required=True, help="the grid folder, <results_dir>/<grid> (its config.json)")
    parser.add_argument("--out", type=Path, help="write the table here (else print it)")
    args = parser.parse_args(argv)
    config = load_grid(parser, args.grid)

    def work():
        leads = run_leads(config)
        if args.out:
            write_text_atomic(args.out, table(leads))
        else:
            print(table(leads), end="")
        return leads

    return run_stage("studies.early_warning", work, lambda leads, seconds: f"{len(leads)} runs in {seconds:.1f} s")

if __name__ == "__main__":
    sys.exit(main())
