"""Aggregate a finished grid: the claims' verdicts, tables, plots and summary.json (analysis.report) in <results_dir>/<grid>.

    python -m analysis.aggregate --config-json <results_dir>/<grid>/config.json --out <results_dir>/<grid>
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import parse_config, run_stage
from harness.settings import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.split("\n")[0])
    parser.add_argument("--config-json", required=True, help="the checked workflow config: <grid>/config.json or inline JSON")
    parser.add_argument("--out", required=True, help="output folder, <results_dir>/<grid>")
    args = parser.parse_args(argv)
    config = Config.build(parse_config(parser, args.config_json))
    if Path(args.out).resolve() != config.grid_dir.resolve():
        parser.error(f"--out {args.out}: not the config's grid folder {config.grid_dir} (a grid's reports live in it)")
    from analysis.report import write_reports  # after validation: matplotlib/scipy load only for real work
    return run_stage("analysis.aggregate", lambda: write_reports(config), lambda summary, seconds: (
        f"{len(summary['cells'])} cells from {sum(len(c['seeds']) for c in summary['cells'])} runs "
        f"-> {args.out} in {seconds:.1f} s"))


if __name__ == "__main__":
    sys.exit(main())
