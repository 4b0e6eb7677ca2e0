"""Aggregate a finished grid: tables, plots and summary.json (eval.report) in <results_dir>/<grid>.

    python -m eval.aggregate --config-json JSON --out <results_dir>/<grid>
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from engines.config import ConfigError, validate


def parse_config(parser: argparse.ArgumentParser, text: str) -> dict:
    """The --config-json argument, validated (engines.config) before any work; errors name the key."""
    try:
        return validate(json.loads(text))
    except json.JSONDecodeError as error:
        parser.error(f"--config-json is not valid JSON: {error}")
    except ConfigError as error:
        parser.error(str(error))


def run_stage(prog: str, work, describe) -> int:
    """Run ``work()``; bad input or a missing/malformed file (ValueError, OSError) is one clear
    line and exit status 2, success one line ``describe(result, seconds)``."""
    start = time.perf_counter()
    try:
        result = work()
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    print(f"{prog}: {describe(result, time.perf_counter() - start)}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.aggregate", description=__doc__.split("\n")[0])
    parser.add_argument("--config-json", required=True, help="the workflow config, as JSON")
    parser.add_argument("--out", required=True, help="output folder, <results_dir>/<grid>")
    args = parser.parse_args(argv)
    config = parse_config(parser, args.config_json)
    from eval.report import write_reports  # after validation: matplotlib/scipy load only for real work
    return run_stage("eval.aggregate", lambda: write_reports(config, args.out), lambda summary, seconds: (
        f"{len(summary['cells'])} cells from {sum(len(c['seeds']) for c in summary['cells'])} runs "
        f"-> {args.out} in {seconds:.1f} s"))


if __name__ == "__main__":
    sys.exit(main())
