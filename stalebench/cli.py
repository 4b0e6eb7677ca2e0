"""`stalebench`: the one command a person types (issue 64). Each subcommand calls the project's own tested
entry point; the rule steps stay `python -m ...` (they are Snakemake's, not a person's).

    stalebench run [SNAKEMAKE OPTIONS]            the workflow (the demo grid of config.yaml unless --configfile)
    stalebench check FILE...                      a config checked as the workflow would, before any job
    stalebench rerun --grid DIR --out DIR         a finished grid's design again on fresh seeds
    stalebench design CONFIG --assume ...         the search for the cheapest seed schedule
    stalebench ui [--config FILE] [--grid DIR]    the MLflow UI at the grid's claims
    stalebench cluster plan CONFIG                the GPU-hour plan of a slime grid, before submitting
    stalebench cluster canary [SNAKEMAKE OPTIONS] the cluster grid's canary job alone
"""
from __future__ import annotations

import argparse
import sys

# subcommand -> (its module, what it does); each module's main(argv) parses the rest of the line itself
TOOLS = {
    "check": ("grid.config", "check config files as the workflow would, before any job (names the file and line)"),
    "rerun": ("analysis.schedule.rerun", "rerun a finished grid's declared design on fresh seeds, compare claims"),
    "design": ("analysis.claims.design_search", "search the cheapest seed schedule for a config's claims"),
    "ui": ("tracking.ui", "open the MLflow UI at a grid's claims"),
}


def _tool(module: str, argv: list[str]) -> int:
    from importlib import import_module

    return import_module(module).main(argv) or 0


def _cluster(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stalebench cluster", description="a slime grid on a SLURM cluster "
                                     "(docs/cluster.md)")
    parser.add_argument("what", choices=["plan", "canary"],
                        help="plan: the GPU-hour plan of a config (then --timings FILE); "
                             "canary: the workflow up to the canary job (Snakemake options follow)")
    args, rest = parser.parse_known_args(argv)
    if args.what == "plan":
        from engines.slime.launch import main as launch

        plan = argparse.ArgumentParser(prog="stalebench cluster plan")
        plan.add_argument("config")
        plan.add_argument("--timings", help="YAML of measured timings (engines.slime.plan)")
        given = plan.parse_args(rest)
        launch(["--plan", given.config, *(["--timings", given.timings] if given.timings else [])])
        return 0
    from stalebench.workflow import run

    return run(["--until", "canary", *rest], prog="stalebench cluster canary")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="stalebench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="stalebench: a grid of stabilizer x lag x seed runs, evaluated, aggregated and tracked.",
        epilog="`stalebench COMMAND --help` says more. The rule steps stay `python -m ...` (docs/design.md).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("run", add_help=False,
                        help="run a grid: the workflow, Snakemake's options passed through (-n: the plan); "
                             "a killed run resumes with the same command")
    for name, (_, what) in TOOLS.items():
        commands.add_parser(name, add_help=False, help=what)
    commands.add_parser("cluster", add_help=False, help="a slime grid on SLURM: `cluster plan CONFIG`, "
                        "`cluster canary`")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "run":
        from stalebench.workflow import run

        return run(rest)
    if name == "cluster":
        return _cluster(rest)
    if name in TOOLS:
        return _tool(TOOLS[name][0], rest)
    parser.parse_args(argv)  # an unknown command: argparse's message, with the choices
    return 2


if __name__ == "__main__":
    sys.exit(main())
