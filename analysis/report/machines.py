"""The report's provenance and compute sections: what the table's runs ran on, and what each
rule's jobs cost.

- Provenance: every attempt recorded in the runs' provenance.json (harness.provenance), grouped
  by code (commit + dirty tree) and by machine (host, CPU, torch's SIMD kernels, torch version).
  A table whose runs come from more than one commit or machine says so, naming the runs, since
  the numbers of one config differ between machines (bf16 kernels) but not between reruns.
- Compute: Snakemake's benchmark files (<grid>/logs/benchmarks/<rule>/...tsv, one per job)
  summed per rule: wall time, CPU time, peak resident memory. They are measurements on the
  machines named above, not properties of the code.
"""
from __future__ import annotations

import csv
import statistics
from collections import defaultdict

from harness.engine import RULES
from harness.run import PROVENANCE
from harness.settings import Config


def _attempts(config: Config) -> tuple[list[tuple[str, dict]], list[str]]:
    """(run name, attempt) for every recorded attempt of the grid's runs; the runs trained without a record
    (a run the seed schedule never trained has no folder: neither)."""
    attempts, missing = [], []
    for recipe, lag, seed in config.grid_runs:
        name, run = f"{recipe}/lag{lag}/seed{seed}", config.folder.run(recipe, lag, seed)
        if not run.config_path.exists():
            continue
        record = run.read_provenance()
        if record is None:
            missing.append(name)
            continue
        attempts += [(name, attempt) for attempt in record["attempts"]]
    return attempts, missing


def code_of(attempt: dict) -> str:
    commit = (attempt.get("git_commit") or "unknown commit")[:10]
    return f"{commit}{' + uncommitted changes' if attempt.get('git_dirty') else ''}"


def machine_of(attempt: dict) -> str:
    return (f"{attempt.get('host')} ({attempt.get('cpu_model')}, torch kernels {attempt.get('cpu_capability')}, "
            f"torch {attempt.get('torch')})")


def _grouped(attempts: list[tuple[str, dict]], describe) -> dict[str, list[str]]:
    """description -> the runs with an attempt of that description, in grid order, each once."""
    groups: dict[str, dict[str, None]] = defaultdict(dict)  # a dict as an ordered set
    for name, attempt in attempts:
        groups[describe(attempt)][name] = None
    return {group: list(names) for group, names in groups.items()}


def _listed(names: list[str], limit: int = 6) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def provenance_lines(config: Config) -> list[str]:
    attempts, missing = _attempts(config)
    lines = ["## Provenance", ""]
    if attempts:
        last = attempts[-1][1]
        lock = str(last.get("requirements_lock_sha256"))[:12]
        lines.append(f"stalebench {last.get('stalebench')}, python {last.get('python')}, "
                     f"lm-eval {last.get('lm_eval')}, requirements.lock {lock} (the last attempt recorded).")
        lines.append("")
    for what, describe in (("commits", code_of), ("machines", machine_of)):
        groups = _grouped(attempts, describe)
        if len(groups) == 1:
            lines.append(f"All runs on one {what[:-1]}: {next(iter(groups))}.")
        elif groups:
            lines.append(f"**The runs of this table come from {len(groups)} {what}** "
                         "(numbers may differ between them):")
            lines += [f"- {group}: {len(names)} run(s): {_listed(names)}" for group, names in groups.items()]
        lines.append("")
    if missing:
        lines += [f"{len(missing)} run(s) have no {PROVENANCE} (trained before it was recorded): {_listed(missing)}", ""]
    return lines


def _number(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):  # Snakemake writes NA or - where it measured nothing
        return None


def benchmark_rows(config: Config) -> list[dict]:
    """Per rule with benchmark files: jobs, total and median wall seconds, total CPU seconds, peak RSS (MB)."""
    root = config.folder.benchmarks_dir
    rows = []
    for rule in RULES:
        single = root / f"{rule}.tsv"  # a rule with one job (prepare, aggregate, track)
        files = sorted(root.glob(f"{rule}/**/*.tsv")) + ([single] if single.is_file() else [])
        records = []
        for path in files:
            with open(path, newline="") as handle:
                records += list(csv.DictReader(handle, delimiter="\t"))
        if not records:
            continue
        wall = [w for w in (_number(r.get("s")) for r in records) if w is not None]
        cpu = [c for c in (_number(r.get("cpu_time")) for r in records) if c is not None]
        rss = [m for m in (_number(r.get("max_rss")) for r in records) if m is not None]
        rows.append({"rule": rule, "jobs": len(records), "wall_s": sum(wall),
                     "median_wall_s": statistics.median(wall) if wall else None,
                     "cpu_s": sum(cpu) if cpu else None, "peak_rss_mb": max(rss) if rss else None})
    return rows


def _cell(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def compute_lines(config: Config) -> list[str]:
    rows = benchmark_rows(config)
    if not rows:
        return []
    lines = ["## Compute per rule", "",
             "Snakemake benchmark files (logs/benchmarks/), summed over each rule's last completed jobs: "
             "measured on the machines above, under their load at the time, so they describe that run, "
             "not the code. aggregate and track rows are from their previous run, if any. CPU s is a lower "
             "bound: Snakemake reads a job's CPU time every 0.5 s for its first ~15 s, then every 30 s, and "
             "misses what the job uses after its last reading (on the demo's jobs, about a fifth of it).", "",
             "| rule | jobs | wall s (total) | wall s (median) | CPU s (total) | peak RSS MB |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['rule']} | {r['jobs']} | {_cell(r['wall_s'], 1)} | {_cell(r['median_wall_s'], 2)} | "
              f"{_cell(r['cpu_s'], 1)} | {_cell(r['peak_rss_mb'], 0)} |" for r in rows]
    return lines + [""]


def render_markdown(config: Config) -> str:
    """The provenance and compute sections, appended to table.md by analysis.report.write."""
    return "\n".join(["", *provenance_lines(config), *compute_lines(config)])
