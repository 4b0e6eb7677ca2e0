"""The grid-wide step of an engine that has one (the tiny engine's warm-start base model):

    python -m engines.prepare --engine NAME --engine-params-json JSON --out <results_dir>/<grid>/base
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import engine as engines
from harness.cli import parse_json_arg, run_stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", required=True)
    parser.add_argument("--engine-params-json", required=True, help="engine_params as JSON (or a path to a JSON file)")
    parser.add_argument("--out", required=True, help="the folder the engine's prepare_outputs are written to")
    args = parser.parse_args(argv)
    engine_params = parse_json_arg(args.engine_params_json, "--engine-params-json")

    def work():
        try:
            engine = engines.get(args.engine)
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        if engine.prepare is None:
            raise ValueError(f"engine {args.engine!r} has no prepare step")
        return engine.prepare(engine_params, Path(args.out))

    return run_stage("engines.prepare", work, lambda _, seconds: f"{args.out} in {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
