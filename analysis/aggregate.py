"""Aggregate a finished grid: the claims' verdicts, tables, plots and summary.json (analysis.report) in <results_dir>/<grid>.

    python -m analysis.aggregate --config-json <results_dir>/<grid>/config.json --out <results_dir>/<grid>
"""
from __future__ import annotations

import argparse
import sys

from harness.cli import parse_config, run_stage
from harness.grid_dir import GridDir
from harness.settings import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.split("\n")[0])
    parser.add_argument("--config-json", required=True, help="the checked workflow config: <grid>/config.json or inline JSON")
    parser.add_argument("--out", required=True, help="output folder, <results_dir>/<grid>")
    args = parser.parse_args(argv)
    config = parse_config(parser, args.config_json)
    from analysis.report import write_reports  # after validation: matplotlib/scipy load only for real work
    return run_stage("analysis.aggregate", lambda: write_reports(Config.build(config), GridDir(args.out)), lambda summary, seconds: (
        f"{len(summary['cells'])} cells from {sum(len(c['seeds']) for c in summary['cells'])} runs "
        f"-> {args.out} in {seconds:.1f} s"))


if __name__ == "__main__":
    sys.exit(main())
