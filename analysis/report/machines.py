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

from collections import defaultdict

from analysis.report.render import Bullets, Section, Table
from grid.settings import Config
from harness.run import PROVENANCE


def _attempts(config: Config) -> tuple[list[tuple[str, dict]], list[str]]:
    """(run name, attempt) for every recorded attempt of the grid's runs; the runs trained without a record
    (a run the seed schedule never trained has no folder: neither)."""
    attempts, missing = [], []
    for recipe, lag, seed in config.grid_runs:
        name, run = f"{recipe}/lag{lag}/seed{seed}", config.folder.run(recipe, lag, seed)
        if not run.path.is_dir():
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


def provenance_section(config: Config) -> Section:
    attempts, missing = _attempts(config)
    blocks = []
    if attempts:
        last = attempts[-1][1]
        lock = str(last.get("requirements_lock_sha256"))[:12]
        blocks.append(f"stalebench {last.get('stalebench')}, python {last.get('python')}, "
                      f"lm-eval {last.get('lm_eval')}, requirements.lock {lock} (the last attempt recorded).")
    for what, describe in (("commits", code_of), ("machines", machine_of)):
        groups = _grouped(attempts, describe)
        if len(groups) == 1:
            blocks.append(f"All runs on one {what[:-1]}: {next(iter(groups))}.")
        elif groups:
            blocks += [f"**The runs of this table come from {len(groups)} {what}** (numbers may differ between them):",
                       Bullets(tuple(f"{group}: {len(names)} run(s): {_listed(names)}" for group, names in groups.items()))]
    if missing:
        blocks.append(f"{len(missing)} run(s) have no {PROVENANCE} (trained before it was recorded): {_listed(missing)}")
    return Section("Provenance", tuple(blocks))


def _cell(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def sections(config: Config) -> list[Section]:
    """What the table's runs ran on and, where Snakemake measured it, what each rule's jobs cost."""
    rows = config.folder.job_costs()
    if not rows:
        return [provenance_section(config)]
    text = ("Snakemake benchmark files (logs/benchmarks/), summed over each rule's last completed jobs: "
            "measured on the machines above, under their load at the time, so they describe that run, "
            "not the code. aggregate and track rows are from their previous run, if any. CPU s is a lower "
            "bound: Snakemake reads a job's CPU time every 0.5 s for its first ~15 s, then every 30 s, and "
            "misses what the job uses after its last reading (on the demo's jobs, about a fifth of it).")
    table = Table.of(["rule", "jobs", "wall s (total)", "wall s (median)", "CPU s (total)", "peak RSS MB"],
                     [[r["rule"], str(r["jobs"]), _cell(r["wall_s"], 1), _cell(r["median_wall_s"], 2),
                       _cell(r["cpu_s"], 1), _cell(r["peak_rss_mb"], 0)] for r in rows])
    return [provenance_section(config), Section("Compute per rule", (text, table))]
