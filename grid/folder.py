"""The grid on disk: ``GridDir`` owns every path of one grid folder, as ``RunDir`` owns a run's.

    grid = GridDir.of(config)              <results_dir>/<grid>
    grid.config_path                       config.json: the checked workflow config (aggregate's and track's input)
    grid.run(recipe, lag, seed)            the RunDir of runs/<recipe>/lag<lag>/seed<seed>/
    grid.table_path("md"), grid.plot_path("curves"), grid.summary_path
                                           the report files analysis.report.write writes (summary.json last)
    grid.mlflow_path                       mlflow.json: the final MLflow sync's marker
    grid.tracking_lock_path                tracking.lock: the grid's one MLflow writer (harness.lock.writer_lock)
    grid.null_check_path                   null_check.json: the lag-0 null check's numbers (engines.null_check)
    grid.canary_path, grid.canary_dir      canary.json, canary/: the engine's one job before the grid (engines.canary)
    grid.look_pattern                      looks/look{look}.json: what each look of a seed schedule decided
    grid.tuning_path                       tuning.json: each recipe's picked value (analysis.schedule.tune)
    grid.rerun_path                        rerun.json: a rerun's declaration (analysis.schedule.rerun)
    grid.design_path                       design.json: the design pinned at the first look (grid.design)
    grid.job_times_path                    job_times.json: the jobs' wall times and the plans that rest on them
    grid.base_dir, grid.logs_dir           base/ (the engine's prepared model), logs/ (per rule, and
                                           Snakemake's benchmark files under logs/benchmarks/)

No other module spells these names: a stage, a rule file or a benchmark that needs one asks this
class (tests/engines/test_engines.py checks it). The file names are module constants so that the rule files
can declare them as outputs before any grid exists.
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

from grid.expand import grid_dir
from harness.engine import RULES
from harness.io import read_json
from harness.run import RUN_FOLDER, RunDir
from harness.run_config import BASE_MODEL

CONFIG, SUMMARY, MLFLOW_MARKER, TRACKING_LOCK = "config.json", "summary.json", "mlflow.json", "tracking.lock"
TUNING_PICK = "tuning.json"  # the equal tuning budget's pick (analysis.schedule.tune)
DESIGN = "design.json"  # the declared design, pinned at the first look (grid.design)
JOB_TIMES = "job_times.json"  # what the aggregate read of the jobs' measured times: apart from summary.json
RERUN = "rerun.json"  # a rerun's declaration and its comparison with the first run (analysis.schedule.rerun)
TABLE_FORMATS = ("md", "csv", "tex")
# pareto and lag_vs_length: a queue grid's (analysis.cells.pareto), a text panel for any other, so that every
# grid's report has the same files (the aggregate rule declares them before the grid exists)
PLOTS = ("curves", "mismatch", "dynamics", "collapse", "staleness", "pareto", "lag_vs_length")
# every file analysis.report.write writes into the grid folder, in the order it writes them
REPORT_FILES = (*(f"table.{fmt}" for fmt in TABLE_FORMATS), *(f"{name}.png" for name in PLOTS), JOB_TIMES, SUMMARY)
QUEUE_PLOTS = ("pareto", "lag_vs_length")  # a queue grid's only (lag_mode queue): no placeholder image for another


def report_files(lag_mode: str) -> tuple[str, ...]:
    """The report files of a grid of ``lag_mode``, in REPORT_FILES order: a queue grid's plots for a queue grid only."""
    return tuple(name for name in REPORT_FILES if lag_mode == "queue" or name.removesuffix(".png") not in QUEUE_PLOTS)


def _measured(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):  # Snakemake writes NA or - where it measured nothing
        return None


class GridDir:
    """One grid folder; paths are properties, files are read by methods."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def of(cls, config: dict) -> "GridDir":
        """The grid folder a checked workflow config names: <results_dir>/<grid>."""
        return cls(grid_dir(config))

    def __repr__(self) -> str:
        return f"GridDir({str(self.path)!r})"

    # ------------------------------------------------------------------ paths
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def mlflow_path(self) -> Path:
        return self.path / MLFLOW_MARKER

    @property
    def tracking_lock_path(self) -> Path:
        return self.path / TRACKING_LOCK

    @property
    def null_check_path(self) -> Path:
        """The engine's lag-0 null check's result (engines.null_check), a grid-wide step before training."""
        return self.path / "null_check.json"

    @property
    def canary_path(self) -> Path:
        """The engine's canary report (engines.canary): written when the grid's first run passed its first
        step and save alone, before any other train job starts."""
        return self.path / "canary.json"

    @property
    def canary_dir(self) -> Path:
        """The canary's scratch run folder (a run folder of its own: its saves never mix with the run's)."""
        return self.path / "canary"

    @property
    def tuning_path(self) -> Path:
        """The equal tuning budget's pick (analysis.schedule.tune): each recipe's value, chosen on the tuning
        seeds, and the confirmation runs it asks for; a grid-wide step between the two."""
        return self.path / TUNING_PICK

    @property
    def rerun_path(self) -> Path:
        """A rerun grid's declaration, written before its runs: the first grid, the fresh seeds, the kernel
        level; then its comparison with the first run (analysis.schedule.rerun)."""
        return self.path / RERUN

    @property
    def design_path(self) -> Path:
        """The design the grid declared, written once at its first look (grid.design): what every later
        aggregate's confirmatory answer reads; a request that reads the runs another way is refused."""
        return self.path / DESIGN

    @property
    def job_times_path(self) -> Path:
        """The jobs' measured costs (job_costs) and the noise section's seeds-vs-k plans priced by them: kept
        apart from summary.json, so that two runs of one grid write the same summary.json byte for byte."""
        return self.path / JOB_TIMES

    @property
    def look_pattern(self) -> str:
        """The interim file of each look of the seed schedule (analysis.schedule.looks), ``{look}`` its number."""
        return str(self.path / "looks" / "look{look}.json")

    @property
    def base_dir(self) -> Path:
        return self.path / BASE_MODEL

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def benchmarks_dir(self) -> Path:
        """Snakemake's benchmark files, logs/benchmarks/<rule>.tsv or <rule>/...tsv (one per job)."""
        return self.logs_dir / "benchmarks"

    def job_costs(self) -> list[dict]:
        """Per rule with benchmark files: jobs, total and median wall seconds, total CPU seconds, peak RSS (MB)."""
        root = self.benchmarks_dir
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
            wall = [w for w in (_measured(r.get("s")) for r in records) if w is not None]
            cpu = [c for c in (_measured(r.get("cpu_time")) for r in records) if c is not None]
            rss = [m for m in (_measured(r.get("max_rss")) for r in records) if m is not None]
            rows.append({"rule": rule, "jobs": len(records), "wall_s": sum(wall),
                         "median_wall_s": statistics.median(wall) if wall else None,
                         "cpu_s": sum(cpu) if cpu else None, "peak_rss_mb": max(rss) if rss else None})
        return rows

    def table_path(self, fmt: str) -> Path:
        if fmt not in TABLE_FORMATS:
            raise ValueError(f"no table format {fmt!r}; the report writes {', '.join(TABLE_FORMATS)}")
        return self.path / f"table.{fmt}"

    def plot_path(self, name: str) -> Path:
        if name not in PLOTS:
            raise ValueError(f"no plot {name!r}; the report draws {', '.join(PLOTS)}")
        return self.path / f"{name}.png"

    def report_paths(self) -> list[Path]:
        """Every report file, summary.json last."""
        return [self.path / name for name in REPORT_FILES]

    def run(self, recipe: str, lag: int, seed: int) -> RunDir:
        return RunDir(self.path / RUN_FOLDER.format(recipe=recipe, lag=lag, seed=seed))

    # ------------------------------------------------------------------ files
    def read_config(self) -> dict:
        """config.json; FileNotFoundError or ValueError naming the file."""
        return read_json(self.config_path)

    def read_tuning(self) -> dict:
        """tuning.json (the pick, analysis.schedule.tune.selection); FileNotFoundError or ValueError naming the file."""
        return read_json(self.tuning_path)
