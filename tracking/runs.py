"""What each MLflow run of a grid gets (tracking.sync's layout): the parent run (the grid), a
seed run per (recipe, lag, seed) read through harness.run.RunDir, a summary run per cell, and with
an equal tuning budget (config ``tuning``) a candidate run per tuning run. The MLflow calls
themselves are tracking.writer's."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from analysis.claims.summary_file import Summary
from analysis.report.colors import SERIES_TAG, series_label
from analysis.report.dynamics import dynamics_keys
from analysis.report.interval_plots import interval_figures
from analysis.report.numbers import METHOD_NAMES
from analysis.statistics.cell_stats import CellStats
from grid.folder import GridDir
from grid.settings import Config, thawed
from harness.io import write_json_atomic, write_text_atomic
from tracking import layout
from tracking.parent import claim_tags, report_markdown, tuning_markdown
from tracking.store import (
    COMPARISON_SUFFIX,
    COMPARISON_VIEW,
    DYNAMICS_VIEW,
    INTERVALS_VIEW,
    SEED_RUNS_VIEW,
    SUMMARY_SUFFIX,
    TUNING_SUFFIX,
    VERDICTS_ARTIFACT,
    comparison_link,
    dynamics_link,
    intervals_link,
    page_link,
    parent_link,
    ui_link,
)
from tracking.writer import Writer

SYNCED = "stalebench.synced_step."  # + "train" or "eval.<task>": last step already logged
TUNING_ARTIFACT = "tuning.md"  # the parent run's pick table (tuning_markdown)
CURVE_DIGEST = "stalebench.curve_digest"  # a summary run's: the curve last logged
SAMPLES_DIGEST = "stalebench.samples_digest"  # a seed run's: the samples file last logged as its table
SAMPLES_TABLE = "samples.json"  # a seed run's sampled completions (the run folder's samples file) as a table
# its columns in reading order (the file's rows have their keys sorted); any other key after them
SAMPLES_COLUMNS = ("step", "prompt", "completion", "reward", "length", "log_ratio_behaviour_target", "policy_version")
MLFLOW_STATUS = {"completed": "FINISHED", "diverged": "FAILED", "failed": "FAILED"}
SCORE_UNITS = ("Scores (eval/TASK/score, fixed, best, selected, auc, their differences such as staleness_cost/* and "
               "vs_baseline/*, and their intervals' bounds, /se and /spread) are in percent (avg@k x 100), as in "
               "table.md; probabilities (improvement/*, p-values), collapse rates, |d| statistics and counts are not.")
TUNING_NOTE = ("The equal tuning budget's candidate runs of grid '{grid}', on the tuning seeds {seeds}: every "
               "candidate value of each recipe at each selection lag and tuning seed (tags tuning = candidate, picked = "
               "true/false). Their scores chose the picked values (tuning.md on the grid's parent run) and are not "
               "results: the picked values' results are their runs on the confirmation seeds, in the experiment "
               "'{grid}'. " + SCORE_UNITS)
DRAWN_NOTE = ("What the cell comparisons of grid '{grid}' draw and nothing else: per cell (recipe x lag) its mean "
              "test-score curve over seeds (the run '<recipe>/lag<lag> mean', with the cell's staleness cost) and the "
              "bounds of the curve's 95% interval (the runs '... low' and '... high'), which each view groups by "
              "recipe into a line over a band. Drawing material, not results: a cell's numbers are its run in the "
              "experiment '{grid}" + SUMMARY_SUFFIX + "'. " + SCORE_UNITS)
UNITS_NOTE = SCORE_UNITS + " Seed runs are here; the per-cell summaries are in the experiment '{grid}" + \
    SUMMARY_SUFFIX + "'."


class Tracker:
    """One pass of one grid into one MLflow store (tracking.sync's module docstring)."""

    def __init__(self, config: Config, stride: int):
        """``stride``: training metrics are logged at every stride-th step (plus the first and last)."""
        self.config = config
        self.writer = Writer(config.results_dir)
        self.experiment_id = self.writer.experiment(config.grid, UNITS_NOTE.format(grid=config.grid))
        self.summary_experiment_id, self.cells = None, {}  # the summary experiment: final sync only
        self.comparison_experiment_id, self.drawn = None, {}  # the comparison views' experiment: final sync only
        self.existing, self.stride = self.writer.existing(self.experiment_id), stride
        self.train_keys: set[str] = set()  # the training metrics the synced runs log (share_dynamics)
        self.collapsed: list[tuple[str, int, int, str]] = []  # (recipe, lag, seed, run id): a collapsed run's samples
        self.with_samples = False  # whether any synced run keeps samples (the report says where they are)
        self.tasks = config.eval.scored_tasks
        for lag in config.lags:
            self.writer.share_view(self.experiment_id, SEED_RUNS_VIEW.format(lag=lag),
                                   layout.seed_runs_view(tuple(self.tasks), lag))
        self.tuning = config.tuning
        self.tuning_experiment_id, self.candidates = None, {}  # the tuning experiment: a tuning grid only
        if self.tuning is not None:
            self.tuning_experiment_id = self.writer.experiment(config.grid + TUNING_SUFFIX, TUNING_NOTE.format(
                grid=config.grid, seeds=list(self.tuning.seeds)))
            self.candidates = self.writer.existing(self.tuning_experiment_id)

    def _run(self, key: str, kind: str, name: str, tags: dict, start_ms: int | None = None):
        """A run of the grid's experiment (found by key, or created)."""
        return self.writer.run(key, kind, name, tags, self.experiment_id, self.existing, start_ms)

    def sync_parent(self, grid_path: Path, summary: Summary | None, pick: dict | None = None, n_runs: int = 0) -> str:
        """The grid's run; ``summary`` (final sync): its claims' verdicts as tags (``claim.<name>``,
        ``claim.<name>.estimate``, ``claims``) and as the run's description (the claims table of
        table.md), the report files as artifacts (the report page, verdicts.md: sync_report, once the views exist);
        ``pick`` (a tuning grid's tuning.json, once written): each recipe's picked value as a tag
        ``tuning.picked.<recipe>``, and in a final sync the pick's table as tuning.md; ``n_runs``: the grid's
        runs there are (tracking.sync counts them), a tag."""
        final = summary is not None
        run_id, found = self._run(f"grid:{self.config.grid}", "parent", self.config.grid,
                                  {"engine": self.config.engine.name, "grid": self.config.grid})
        tags = {"n_runs": n_runs, "mlflow.source.git.commit": self.writer.commit}
        if final:
            tags.update(claim_tags(summary))
        if pick is not None:
            tags.update({f"tuning.picked.{recipe}": layout.param_text(entry["picked"])
                         for recipe, entry in pick["recipes"].items()})
        self.writer.log(run_id, tags=tags)
        if final:
            with tempfile.TemporaryDirectory(prefix="track_") as tmp:
                write_json_atomic(Path(tmp) / "workflow_config.json", thawed(self.config.raw))
                written = [Path(tmp) / "workflow_config.json"]
                if pick is not None:
                    write_text_atomic(Path(tmp) / TUNING_ARTIFACT, tuning_markdown(self.config.grid, pick))
                    written.append(Path(tmp) / TUNING_ARTIFACT)
                self.writer.log_artifacts(run_id, written + [
                    path for path in GridDir(grid_path).report_paths() if path.exists()])
        self.writer.set_status(run_id, found, "FINISHED" if final else "RUNNING")
        return run_id

    def sync_run(self, parent_id: str, recipe: str, lag: int, seed: int, numbers: dict | None,
                 candidate: tuple[dict, dict] | None = None) -> bool:
        """Sync one seed run; ``numbers`` = its per-seed numbers (final sync) or None (live);
        ``candidate``: the (params, tags) of a tuning run (candidate_runs), which goes to the tuning
        experiment instead, tied to the grid's run by tag. Returns False for a run that has not
        started (live sync only)."""
        from mlflow.entities import Metric
        run = self.config.folder.run(recipe, lag, seed)
        if numbers is not None:
            for path in (run.config_path, run.status_path):
                if not path.exists():
                    raise FileNotFoundError(f"run output missing: {path}")
        if not run.config_path.exists():
            return False
        pinned, status = run.read_pinned(), run.read_status()
        key = pinned.run_key
        start_ms = int(run.config_path.stat().st_mtime * 1000)
        name, (extra_params, extra_tags) = f"{recipe}/lag{lag}/seed{seed}", candidate or ({}, {})
        if candidate is None:
            run_id, found = self._run(key, "run", name, {"mlflow.parentRunId": parent_id}, start_ms)
        else:
            run_id, found = self.writer.run(key, "candidate", name, {"stalebench.grid_run": parent_id},
                                            self.tuning_experiment_id, self.candidates, start_ms)
        tags = found.data.tags if found is not None else {}
        train_rows = run.read_metrics()
        self.train_keys.update(*train_rows)
        times = layout.step_times_ms(train_rows, start_ms)
        metrics, problems = [], {}
        new_tags = {**pinned.identity_keys, **extra_tags, SERIES_TAG: series_label(recipe, self.config.recipes),
                    "run_dir": os.path.relpath(run.path.resolve(), self.config.results_dir.resolve())}
        provenance = run.read_provenance()
        if provenance is not None:
            new_tags.update(layout.provenance_tags(provenance))
        done = int(tags.get(SYNCED + "train", -1))
        rows = [row for row in train_rows if row["step"] > done and (
            row["step"] % self.stride == 0 or row["step"] == 1 or row is train_rows[-1])]
        for row in rows:  # every stride-th step, the first and the last (tracking.sync's docstring)
            for name, value in row.items():
                if name not in ("step", "time") and layout.number(value) is not None:
                    metrics.append(Metric("train/" + name, layout.number(value), times[row["step"]], row["step"]))
        if rows:
            new_tags[SYNCED + "train"] = rows[-1]["step"]
        for task in self.tasks:
            every = run.read_eval(task)
            if every and layout.number(every[-1].get("n_problems")) is not None:
                problems[task] = int(every[-1]["n_problems"])
            done = int(tags.get(SYNCED + f"eval.{task}", -1))
            points = [p for p in layout.eval_metrics(every) if p[0] > done]
            metrics += [Metric(f"eval/{task}/{name}", value, times.get(step, start_ms + step), step)
                        for step, name, value in points]
            if points:
                new_tags[SYNCED + f"eval.{task}"] = max(p[0] for p in points)
        if status is not None:
            new_tags.update({"status": status.get("status"), "status_step": status.get("step")})
            if MLFLOW_STATUS.get(status.get("status")) != "FINISHED":  # the reason, also as the run's description
                new_tags["status_reason"] = new_tags["mlflow.note.content"] = status.get("message") or status.get("status")
        if numbers is not None:
            metrics += self.writer.changed(found, layout.seed_values(numbers))
            if "collapsed" in numbers:
                new_tags["collapsed"] = str(bool(numbers["collapsed"])).lower()
        params = missing_params(found, {**layout.run_params(pinned, self.config.eval.as_dict(), problems), **extra_params})
        self.writer.log(run_id, metrics, params=params, tags=new_tags)
        if self._samples(run_id, tags, run) and numbers and numbers.get("collapsed"):
            self.collapsed.append((recipe, lag, seed, run_id))
        if status is None:
            self.writer.set_status(run_id, found, "RUNNING")
        else:
            end_ms = int(run.status_path.stat().st_mtime * 1000)
            self.writer.set_status(run_id, found, MLFLOW_STATUS.get(status.get("status"), "FAILED"),
                                   max(end_ms, start_ms))
        return True

    def _samples(self, run_id: str, tags: dict, run) -> bool:
        """The run's sampled completions (RunDir.samples_path, if its engine keeps them) as its table SAMPLES_TABLE,
        once per change of the file or of the table's form (their digest in ``tags``, the run's); whether it has them."""
        if not run.samples_path.exists():
            return False
        self.with_samples = True
        digest = hashlib.sha256(run.samples_path.read_bytes() + repr(SAMPLES_COLUMNS).encode()).hexdigest()[:16]
        if tags.get(SAMPLES_DIGEST) != digest:
            rows = run.read_samples()
            self.writer.log_table(run_id, [{**dict.fromkeys(k for k in SAMPLES_COLUMNS if k in row), **row}
                                           for row in rows], SAMPLES_TABLE)
            self.writer.log(run_id, tags={SAMPLES_DIGEST: digest})
        return True

    def sync_report(self, parent_id: str, summary: Summary, images: list[tuple[str, str]]) -> None:
        """The report page, the parent run's verdicts.md (parent.report_markdown), linking relative to the page each
        view of tracking.store, each interval chart of ``images`` (sync_intervals') and the collapsed runs' samples;
        the grid experiment's description links it, so the UI's own navigation reaches it. Last in a final sync."""
        lags = summary.lags
        views = [("Intervals", [("each recipe's staleness cost, each claim's contrast",
                                 intervals_link("", self.comparison_experiment_id))]),
                 ("Each interval chart", images),
                 ("Training dynamics", [(f"lag {lag}", dynamics_link("", self.experiment_id, lag)) for lag in lags]),
                 ("Test score per recipe", [(f"lag {lag}", comparison_link("", self.comparison_experiment_id, lag))
                                            for lag in lags]),
                 ("Seed runs", [(f"lag {lag}", ui_link("", self.experiment_id, lag)) for lag in lags])]
        cells: dict[str, list] = {}
        for recipe, lag, seed, run_id in sorted(self.collapsed):
            cells.setdefault(f"{recipe}/lag{lag}", []).append(
                (f"seed {seed}", page_link("", f"experiments/{self.experiment_id}/runs/{run_id}/artifacts/{SAMPLES_TABLE}")))
        with tempfile.TemporaryDirectory(prefix="track_") as tmp:
            write_text_atomic(Path(tmp) / VERDICTS_ARTIFACT, report_markdown(
                summary, views, list(cells.items()) if self.with_samples else None))
            self.writer.log_artifacts(parent_id, [Path(tmp) / VERDICTS_ARTIFACT])
        self.writer.describe(self.experiment_id, f"**[The report: claims, intervals, dynamics, samples]("
                             f"{parent_link('', self.experiment_id, parent_id)})**\n\n" + UNITS_NOTE.format(
                                 grid=self.config.grid))

    def share_dynamics(self) -> None:
        """The training dynamics' view of each lag (layout.dynamics_view) over the metrics the synced runs log; none
        before a run has logged a step."""
        groups = dynamics_keys(self.train_keys)
        for lag in self.config.lags if groups else ():
            self.writer.share_view(self.experiment_id, DYNAMICS_VIEW.format(lag=lag), layout.dynamics_view(groups, lag))

    def candidate_runs(self, pick: dict | None, final: bool) -> list[tuple]:
        """The tuning runs (every candidate x selection lag x tuning seed) as (recipe, lag, seed,
        numbers, candidate), sync_run's arguments: they go to the "<grid> tuning" experiment, never among the grid's
        runs, so that a tuning score is not read as a result (a picked candidate's is biased upward).
        Params ``tuning.recipe``, ``tuning.param``, ``tuning.value``; tags ``tuning = candidate`` and,
        once ``pick`` (tuning.json) exists, ``picked = true/false``. No per-run numbers (the
        summary's are the confirmation runs'): their curves only."""
        of = {candidates.variant(value): (recipe, candidates, value)
              for recipe, candidates in self.tuning.candidates.items() for value in candidates.values}
        runs = []
        for variant, lag, seed in self.tuning.runs():
            recipe, candidates, value = of[variant]
            params = {"tuning.recipe": recipe, "tuning.param": layout.param_text(list(candidates.params)),
                      "tuning.value": layout.param_text(value)}
            tags = {"tuning": "candidate"}
            if pick is not None:
                tags["picked"] = str(variant == pick["recipes"][recipe]["variant"]).lower()
            runs.append((variant, lag, seed, {} if final else None, (params, tags)))
        return runs

    def sync_cell(self, parent_id: str, cell: CellStats, summary: Summary) -> None:
        """A summary run in the "<grid> summary" experiment: every number of the cell (layout.cell_values),
        its mean test-score curve (layout.curve_metrics) and the baseline it is compared to; and what the
        comparison views draw of the cell, in the "<grid> comparison" experiment (comparison_runs)."""
        if self.summary_experiment_id is None:
            self.summary_experiment_id = self.writer.experiment(
                self.config.grid + SUMMARY_SUFFIX, f"One run per cell (recipe x lag) of grid '{self.config.grid}': "
                "means over seeds with their intervals and tests. " + SCORE_UNITS)
            self.comparison_experiment_id = self.writer.experiment(self.config.grid + COMPARISON_SUFFIX,
                                                                   DRAWN_NOTE.format(grid=self.config.grid))
            for lag in summary.lags:
                methods = {point.method for c in summary.cells if c.lag == lag for point in c.curve}
                band = ", ".join(METHOD_NAMES.get(method, method) for method in sorted(methods))
                self.writer.share_view(self.comparison_experiment_id, COMPARISON_VIEW.format(lag=lag),
                                       layout.comparison_view(summary.test_task, lag, band, [
                                           series_label(recipe, self.config.recipes) for recipe in summary.recipes]))
            self.cells = self.writer.existing(self.summary_experiment_id)
            self.drawn = self.writer.existing(self.comparison_experiment_id)
        recipe, lag = cell.cell
        key = f"cell:{self.config.grid}:{recipe}:lag{lag}"
        run_id, found = self.writer.run(key, "cell", f"summary {recipe}/lag{lag}", {"stalebench.grid_run": parent_id},
                                        self.summary_experiment_id, self.cells)
        values, tags = layout.cell_values(cell)
        tags.update({"seeds": json.dumps(cell.seeds), "run_keys": json.dumps(cell.run_keys),
                     "baseline": str(summary.baseline), "mlflow.note.content": baseline_note(summary, lag)})
        params = {}  # the params its seeds share (from the first seed's config)
        first = self.config.folder.run(recipe, lag, cell.seeds[0]) if cell.seeds else None
        if first is not None and first.config_path.exists():
            params = layout.cell_params(first.read_pinned())
        params.update({"recipe": recipe, "lag": str(lag)})
        self.writer.log(run_id, self._curve(found, tags, summary, cell, "estimate") + self.writer.changed(found, values),
                        params=missing_params(found, params), tags=tags)
        self.writer.set_status(run_id, found, "FINISHED")
        self.comparison_runs(parent_id, cell, summary)

    def comparison_runs(self, parent_id: str, cell: CellStats, summary: Summary) -> None:
        """The cell as the comparison views draw it, in the "<grid> comparison" experiment (DRAWN_NOTE), where no
        run list, Compare or search of the grid's results meets them: its mean curve and a run per bound of the
        curve's 95% interval (layout.BAND_PARTS). The staleness costs with their intervals: the intervals' charts."""
        recipe, lag = cell.cell
        for part, label in (("estimate", "mean"), *((part, part) for part in layout.BAND_PARTS)):
            drawn_id, drawn = self.writer.run(f"cell:{self.config.grid}:{recipe}:lag{lag}:{part}", "drawn",
                                              f"{recipe}/lag{lag} {label}", {"stalebench.grid_run": parent_id},
                                              self.comparison_experiment_id, self.drawn)
            tags = {"mlflow.note.content": f"The {label} of the test-score curve of cell {recipe}/lag{lag} (its "
                                           "95% interval's bound for low and high), step by step. " + SCORE_UNITS,
                    SERIES_TAG: series_label(recipe, self.config.recipes)}
            metrics = self._curve(drawn, tags, summary, cell, part)
            self.writer.log(drawn_id, metrics, tags=tags, params=missing_params(drawn, {"recipe": recipe, "lag": str(lag)}))
            self.writer.set_status(drawn_id, drawn, "FINISHED")

    def sync_intervals(self, parent_id: str, summary: Summary) -> list[tuple[str, str]]:
        """The intervals' charts (analysis.report.interval_plots: each later lag's staleness costs, each tested claim's
        contrast) as the images of one figure run in the comparison experiment, out of every result list, and their
        view (layout.intervals_view). After sync_cell. Returns each chart's (label, link to its PNG): one click away."""
        metric = layout.staleness_cost_metric(summary.claims)
        run_id, found = self.writer.run(f"intervals:{self.config.grid}", "figure", "intervals (drawn, not a result)",
                                        {"stalebench.grid_run": parent_id}, self.comparison_experiment_id, self.drawn)
        with tempfile.TemporaryDirectory(prefix="track_") as tmp:
            charts = interval_figures(self.config, summary, metric, Path(tmp))
            paths = self.writer.log_images(run_id, charts)
        self.writer.log(run_id, tags={"mlflow.note.content": "The intervals' charts of the comparison, images drawn "
                                      "from summary.json: drawing material, not a result. " + SCORE_UNITS})
        self.writer.set_status(run_id, found, "FINISHED")
        self.writer.share_view(self.comparison_experiment_id, INTERVALS_VIEW, layout.intervals_view([k for k, _ in charts]))
        return [(key, page_link("", f"experiments/{self.comparison_experiment_id}/runs/{run_id}/artifacts/{path}"))
                for (key, _), path in zip(charts, paths)]

    def _curve(self, found, tags: dict, summary: Summary, cell: CellStats, part: str) -> list:
        """The cell curve's ``part`` as step metrics, unless the run already has it (its digest in ``tags``)."""
        digest = layout.curve_digest(cell.curve, part)
        unchanged = found is not None and found.data.tags.get(CURVE_DIGEST) == digest
        tags[CURVE_DIGEST] = digest
        return [] if unchanged else layout.curve_metrics(summary.test_task, cell.curve, self.writer.now, part)


def missing_params(found, params: dict) -> dict:
    """The params a run lacks, not only a new run's: a sync killed between create_run and its first log
    left a run with none."""
    have = found.data.params if found is not None else {}
    return {k: v for k, v in params.items() if k not in have}


def baseline_note(summary: Summary, lag: int) -> str:
    """A summary run's description: what its comparisons are measured against."""
    if summary.baseline is None:
        return "No baseline declared (config key `baseline`): no vs_baseline comparisons."
    return (f"vs_baseline/* and improvement/*: this cell against the baseline {summary.baseline} at lag {lag}; "
            f"staleness_cost/*: against this recipe at lag {summary.reference_lag}. " + SCORE_UNITS)
