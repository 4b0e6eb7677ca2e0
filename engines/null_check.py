"""The lag-0 null check of an engine that has one, a grid-wide step between prepare and every run:

    python -m engines.null_check --engine NAME --params-json JSON [--base DIR] --out <grid>/null_check.json

JSON: grid.settings.Config.null_check_params. The report is written only when the check passes;
a refusal exits with status 2 (harness.cli.EXIT_BAD_INPUT) and the numbers, so no run trains.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import engine as engines
from harness.cli import parse_json_arg, run_stage
from harness.io import write_json_atomic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", required=True)
    parser.add_argument("--params-json", required=True, help="the check's params as JSON (or a path to a JSON file)")
    parser.add_argument("--base", default=None, help="the folder of the engine's prepare step, if it has one")
    parser.add_argument("--out", required=True, help="the report (JSON), written when the check passes")
    args = parser.parse_args(argv)
    params = parse_json_arg(args.params_json, "--params-json")

    def work():
        try:
            engine = engines.get(args.engine)
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        if engine.null_check is None:
            raise ValueError(f"engine {args.engine!r} has no null check")
        report = engine.null_check(params, Path(args.base) if args.base else None)
        write_json_atomic(args.out, report)
        return report

    def describe(report, seconds):
        cases = "; ".join(f"{c['rollout_dtype']}/{c['routing_replay']}: mean ratio {c['ratio_mean']:.4f}, "
                          f"{100 * c['outside_fraction']:.2f}% outside, z {c['calibration_z']:+.1f}"
                          for c in report["cases"])
        return f"passed in {seconds:.1f} s ({cases}) -> {args.out}"

    return run_stage("engines.null_check", work, describe)


if __name__ == "__main__":
    sys.exit(main())
