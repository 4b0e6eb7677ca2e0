"""Rerun a finished grid's declared design on fresh seeds and check its claims against the first run
(docs/statistics.md, "A rerun that checks it").

    python -m analysis.schedule.rerun --grid results/demo --out results/demo_rerun [--kernel avx2] [--cores 2]
    python -m analysis.schedule.rerun --grid results/demo --out results/demo_rerun --dry-run   # the plan; writes nothing

The new grid is the first grid's checked config (its config.json: recipes, lags, claims, seed schedule,
every setting) on as many fresh seeds as it declared, each above every seed it used, in a folder of its
own. The rerun is declared before any job: the new grid folder's rerun.json names the first grid, the
seeds and the kernel level. Then the normal workflow runs it (``snakemake --configfile <grid>/config.json
-C grid=<new> results_dir=<parent> seeds=[...] side_by_side=null``, with the kernel level's environment:
``--kernel avx2`` sets ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2), and the command prints,
claim by claim, the first run's outcome and printed replication probability beside the rerun's outcome,
and how many outcomes repeated against the number those probabilities predict (their sum). The
comparison is added to rerun.json. A grid with a tuning section is refused (its tuning seeds would
need a fresh draw too).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from analysis.claims.summary_file import Summary, read_summary
from grid.folder import GridDir
from grid.loader import load_grid
from grid.settings import Config
from harness.cli import EXIT_BAD_INPUT
from harness.io import read_json, write_json_atomic

KERNELS = {"default": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
ROOT = Path(__file__).resolve().parents[2]


def fresh_seeds(config: Config) -> list[int]:
    """As many seeds as the grid declares, each above every seed it declares."""
    return list(range(max(config.seeds) + 1, max(config.seeds) + 1 + len(config.seeds)))


def declare(config: Config, first: Path, out: Path, kernel: str, write: bool = True) -> dict:
    """The rerun's declaration (rerun.json), written before any job (not by a dry run: ``write`` False); an
    existing one must be the same rerun."""
    if config.tuning is not None:
        raise ValueError(f"{first}: a grid with a tuning section (config key 'tuning') is not rerun: its tuning "
                         "seeds would need fresh ones too")
    if out.resolve() == first.resolve():
        raise ValueError(f"--out {out}: the first grid's own folder; a rerun goes to a new one")
    declared = {"of": str(first.resolve()), "grid": out.name, "results_dir": str(out.resolve().parent),
                "seeds": fresh_seeds(config), "kernel": kernel, "environment": KERNELS[kernel]}
    path = GridDir(out).rerun_path
    if path.exists():
        before = {key: read_json(path).get(key) for key in declared}
        if before != declared:
            raise ValueError(f"{path}: declares another rerun ({before}); choose another --out")
    elif write:
        write_json_atomic(path, declared)
    return declared


def command(first: Path, declared: dict, cores: int, extra: list[str]) -> list[str]:
    """The workflow call: the first grid's config with the new grid's name, folder and seeds."""
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    overrides = [f"grid={declared['grid']}", f"results_dir={declared['results_dir']}",
                 f"seeds={json.dumps(declared['seeds'])}", "side_by_side=null"]
    return [snakemake, "-s", str(ROOT / "Snakefile"), f"-c{cores}", "--configfile", str(GridDir(first).config_path),
            "-C", *overrides, *extra]


def compare(first: Summary, second: Summary) -> dict:
    """Each claim both grids tested: the two outcomes, the first run's printed probability, whether they
    agree; the count that agreed and the count the probabilities predict (their sum)."""
    rerun = {c.claim.name: c for c in second.claims if c.tested}
    rows = [{"name": c.claim.name, "first": c.verdict, "first_look": c.look, "replication": c.replication,
             "rerun": rerun[c.claim.name].verdict, "rerun_look": rerun[c.claim.name].look,
             "same": c.verdict == rerun[c.claim.name].verdict}
            for c in first.claims if c.claim.name in rerun and c.tested]
    printed = [r["replication"] for r in rows if r["replication"] is not None]
    return {"claims": rows, "same": sum(r["same"] for r in rows), "expected_same": sum(printed),
            "compared": len(rows), "seeds": [first.seeds, second.seeds]}


def render(result: dict, declared: dict) -> str:
    lines = [f"rerun of {declared['of']} on seeds {declared['seeds']} (kernel {declared['kernel']}) -> "
             f"{declared['results_dir']}/{declared['grid']}", "",
             "| claim | first run: outcome (look) | printed P(same outcome on a rerun) | rerun: outcome (look) | same |",
             "|---|---|---|---|---|"]
    for r in result["claims"]:
        p = "–" if r["replication"] is None else f"{r['replication']:.2f}"
        lines.append(f"| {r['name']} | {r['first']} ({r['first_look']}) | {p} | {r['rerun']} ({r['rerun_look']}) | "
                     f"{'yes' if r['same'] else '**no**'} |")
    lines += ["", f"{result['same']} of {result['compared']} outcomes repeated; the first run's printed probabilities "
              f"predict {result['expected_same']:.2f}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.schedule.rerun", description=__doc__.split("\n")[0])
    parser.add_argument("--grid", required=True, help="the finished grid folder, <results_dir>/<grid>")
    parser.add_argument("--out", required=True, type=Path, help="the new grid's folder, <results_dir>/<new grid>")
    parser.add_argument("--kernel", choices=sorted(KERNELS), default="default", help="the CPU kernel level of its runs")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="print the workflow's plan (snakemake -n), run nothing")
    parser.add_argument("snakemake_args", nargs="*", help="after --: passed to snakemake (e.g. --profile ...)")
    args = parser.parse_args(argv)
    config = load_grid(parser, args.grid)
    first = GridDir(args.grid)
    try:
        summary = read_summary(first.summary_path)  # the first run's outcomes: a grid that has not aggregated is refused here
        declared = declare(config, first.path, args.out, args.kernel, write=not args.dry_run)
    except (ValueError, OSError) as error:
        print(f"analysis.schedule.rerun: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    call = command(first.path, declared, args.cores, (["-n"] if args.dry_run else []) + args.snakemake_args)
    print(f"analysis.schedule.rerun: {' '.join(call)}", file=sys.stderr)
    done = subprocess.run(call, env={**os.environ, **declared["environment"]}, check=False)
    if done.returncode != 0 or args.dry_run:
        return done.returncode
    second = GridDir(args.out)
    result = compare(summary, read_summary(second.summary_path))
    write_json_atomic(second.rerun_path, {**declared, "comparison": result})
    print(render(result, declared))
    return 0


if __name__ == "__main__":
    sys.exit(main())
