"""The grid-wide step of an engine that has one (the tiny engine's warm-start base model):

    python -m engines.prepare --engine NAME --engine-params-json JSON --out <results_dir>/<grid>/base
"""
from __future__ import annotations

import argparse
from pathlib import Path

from harness import engine as engines
from harness.cli import parse_json_arg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", required=True)
    parser.add_argument("--engine-params-json", required=True, help="engine_params as JSON (or a path to a JSON file)")
    parser.add_argument("--out", required=True, help="the folder the engine's prepare_outputs are written to")
    args = parser.parse_args(argv)
    try:
        engine = engines.get(args.engine)
        if engine.prepare is None:
            raise ValueError(f"engine {args.engine!r} has no prepare step")
        engine.prepare(parse_json_arg(args.engine_params_json, "--engine-params-json"), Path(args.out))
    except (ValueError, KeyError) as error:
        raise SystemExit(f"engines.prepare: {error}") from None


if __name__ == "__main__":
    main()
