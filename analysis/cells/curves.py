"""Per-run numbers from a run's evaluation curve(s) and training log (docs/design.md, "Metrics").

One function, :func:`summarize_run`, turns one run into the numbers the aggregation stage
averages over seeds. Every rule below is declared here, before any result is seen:

- fixed-step score: the test score at ``fixed_step`` (default: the last evaluated step).
- best-checkpoint score: the max over evaluated steps (the paper's Table 1 number; optimistic,
  because the test set picks the checkpoint). Ties go to the earliest step.
- selected-checkpoint score: the test score at the step that is best on the selection task
  (ties: earliest step); ``None`` when the config names no selection task.
- AUC: trapezoidal area under the score curve divided by the length of the window. The window
  starts at the first evaluated checkpoint (step 0 counts only if the base model was scored:
  nothing is extrapolated before the first point) and ends at the step budget; a completed run
  whose last evaluation falls before the budget holds its last score to the budget.
- diverged runs (the run status "diverged": non-finite loss or weights) score 0 from the step
  they diverged at through the budget: a run that produced no usable model counts as no score,
  not as a missing seed (dropping it would flatter the recipe). So its fixed-step score at a step
  it never reached is 0, and its AUC includes the zeros. Its best-checkpoint score is the max over
  the checkpoints it did produce; one that diverged before its first checkpoint scores 0 on every
  metric (best_step and selected_step None).
- collapse (config ``collapse.fraction`` = f, default 0.5, and ``collapse.confirm`` = c, default 2):
  diverged, or after its peak the score falls below f x peak and stays below through the last
  evaluation, over at least c evaluations (so one noisy last evaluation is not a collapse). A run
  whose peak is 0 never collapses (nothing to fall from).
- d-bar: the mean of the per-step "d/mean_abs" (mean |log pi/mu| over active tokens) over the
  last 10% of optimizer steps (at least one step), and the tail: the mean of "d/p99" over the same
  steps. Steps are weighted equally (the per-step token counts are not logged); non-finite values
  (a diverging step) are left out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grid.settings import Config
from harness.io import read_jsonl
from harness.run import RunDir
from harness.run_config import PinnedRun

TAIL_FRACTION = 0.1  # d-bar window: the last 10% of optimizer steps


@dataclass(frozen=True)
class RunSummary:
    status: str
    fixed_step: int
    fixed: float
    best_step: int | None  # None: diverged before the first checkpoint
    best: float
    selected_step: int | None
    selected: float | None
    auc: float
    peak: float
    collapsed: bool
    collapse_step: int | None  # first step of the final below-threshold stretch (or the divergence step)
    dbar: float
    dtail: float


def load_curve(path: str | Path, allow_empty: bool = False) -> list[tuple[int, float]]:
    """(step, score) pairs of an ``eval/<task>.jsonl`` file, sorted by step. A step scored twice
    is an error (the scoring command never rescores a checkpoint). A missing or empty file is an
    error unless ``allow_empty`` (a run that diverged before its first checkpoint has no scores)."""
    rows = read_jsonl(path)
    if not rows and not allow_empty:
        raise FileNotFoundError(f"no evaluations in {path} (missing or empty)")
    curve: dict[int, float] = {}
    for row in rows:
        try:
            step, score = int(row["step"]), float(row["score"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: each line needs numeric 'step' and 'score' ({error})") from None
        if step in curve:
            raise ValueError(f"{path}: step {step} evaluated twice")
        if not math.isfinite(score):
            raise ValueError(f"{path}: non-finite score at step {step}")
        curve[step] = score
    return sorted(curve.items())


def summarize_run(test: list[tuple[int, float]], *, budget: int, status: str = "completed",
                  status_step: int | None = None, fixed_step: int | None = None,
                  selection: list[tuple[int, float]] | None = None, collapse_fraction: float = 0.5,
                  collapse_confirm: int = 1, train_metrics: list[dict] | None = None) -> RunSummary:
    """All per-run numbers (module docstring) from the test curve and, optionally, the selection
    curve and the training log. ``status``/``status_step`` come from the run status (harness.run.RunDir.read_status)."""
    if status not in ("completed", "diverged"):
        raise ValueError(f"run status {status!r} cannot be scored (only completed or diverged runs)")
    if not 0 < collapse_fraction < 1:
        raise ValueError(f"collapse.fraction must be in (0, 1), got {collapse_fraction}")
    diverged = status == "diverged"
    dbar, dtail = mismatch_tail(train_metrics or [])
    if not test:
        if not diverged:
            raise ValueError("empty test curve of a run that did not diverge")
        return RunSummary(status=status, fixed_step=int(fixed_step or budget), fixed=0.0, best_step=None,
                          best=0.0, selected_step=None, selected=0.0 if selection is not None else None,
                          auc=0.0, peak=0.0, collapsed=True, collapse_step=status_step,
                          dbar=dbar, dtail=dtail)
    steps = [s for s, _ in test]
    scores = np.array([v for _, v in test], dtype=float)

    if fixed_step is None:
        fixed_step = budget if diverged else steps[-1]
    fixed = _score_at(test, fixed_step, diverged)

    best_i = int(np.argmax(scores))  # argmax returns the first maximum: ties go to the earliest step
    selected_step = selected = None
    if selection is not None:
        if not selection:
            raise ValueError("the selection task has no scores while the test task has")
        selected_step = selection[int(np.argmax([v for _, v in selection]))][0]
        selected = _score_at(test, selected_step, diverged)

    collapse_step = _collapse_step(test, collapse_fraction, collapse_confirm)
    if diverged:
        collapse_step = status_step if status_step is not None else steps[-1]
    return RunSummary(status=status, fixed_step=int(fixed_step), fixed=fixed,
                      best_step=int(steps[best_i]), best=float(scores[best_i]),
                      selected_step=selected_step, selected=selected,
                      auc=auc(test, budget, diverged=diverged, diverged_at=status_step),
                      peak=float(scores.max()), collapsed=diverged or collapse_step is not None,
                      collapse_step=collapse_step, dbar=dbar, dtail=dtail)


def _score_at(curve: list[tuple[int, float]], step: int, diverged: bool) -> float:
    for s, v in curve:
        if s == step:
            return float(v)
    if diverged and step > curve[-1][0]:
        return 0.0
    raise ValueError(f"step {step} was not evaluated (evaluated: {[s for s, _ in curve]}); "
                     "eval.fixed_step must be a checkpoint step (a multiple of eval_every)")


def budget_curve(curve: list[tuple[int, float]], budget: int, *, diverged: bool = False,
                 diverged_at: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The curve over the AUC window [first evaluated step, budget] (module docstring): a
    completed run holds its last score to the budget; a diverged run drops to 0 at the step it
    diverged at (or right after its last checkpoint when that step is unknown) and stays 0."""
    steps = [float(s) for s, _ in curve]
    scores = [float(v) for _, v in curve]
    if steps[-1] > budget:
        raise ValueError(f"curve has step {int(steps[-1])} beyond the step budget {budget}")
    if diverged:
        # the last score held to the divergence step, a vertical drop to 0 there (np.trapezoid
        # accepts repeated x), then 0: the same step-wise reading as a completed run's held score
        drop = float(diverged_at) if diverged_at is not None else steps[-1]
        drop = min(max(drop, steps[-1]), float(budget))
        steps += [drop, drop, float(budget)]
        scores += [scores[-1], 0.0, 0.0]
    elif steps[-1] < budget:
        steps.append(float(budget))
        scores.append(scores[-1])
    return np.array(steps), np.array(scores)


def auc(curve: list[tuple[int, float]], budget: int, *, diverged: bool = False,
        diverged_at: int | None = None) -> float:
    """Trapezoidal area under the score curve over [first evaluated step, budget], divided by the
    window's length (so a constant curve at c has AUC c). A single point at the budget: its score."""
    x, y = budget_curve(curve, budget, diverged=diverged, diverged_at=diverged_at)
    width = x[-1] - x[0]
    if width == 0:
        return float(y[-1])
    return float(np.trapezoid(y, x) / width)


def _collapse_step(curve: list[tuple[int, float]], fraction: float, confirm: int = 1) -> int | None:
    """First step of the stretch, after the peak, that stays below fraction x peak through the
    last evaluation and spans at least ``confirm`` evaluations; None if there is none."""
    scores = [v for _, v in curve]
    peak_i = int(np.argmax(scores))
    threshold = fraction * scores[peak_i]
    if not scores[-1] < threshold:
        return None
    first = len(scores) - 1
    while first - 1 > peak_i and scores[first - 1] < threshold:
        first -= 1
    return int(curve[first][0]) if len(scores) - first >= confirm else None


def mismatch_tail(train_metrics: list[dict]) -> tuple[float, float]:
    """(d-bar, tail): means of "d/mean_abs" and "d/p99" over the last 10% of steps (NaN if absent)."""
    if not train_metrics:
        return math.nan, math.nan
    rows = sorted(train_metrics, key=lambda row: row["step"])
    window = rows[-max(1, math.ceil(TAIL_FRACTION * len(rows))):]

    def tail_mean(key: str) -> float:
        values = [float(row[key]) for row in window if row.get(key) is not None]
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else math.nan

    return tail_mean("d/mean_abs"), tail_mean("d/p99")


def read_run(run: RunDir, config: Config) -> tuple[RunSummary, PinnedRun, list[tuple[int, float]], list[dict]]:
    """Summarize one run folder under the grid's ``config``; returns the summary, the run's
    config.json (typed), its test curve and its training metrics rows. Errors name the bad file (and line)."""
    pinned = run.read_pinned()
    status = run.read_status()
    if status is None:
        raise FileNotFoundError(f"run output missing: {run.status_path}")
    settings = config.eval
    diverged = status.get("status") == "diverged"
    test = load_curve(run.eval_path(settings.test_task), allow_empty=diverged)
    train_metrics = run.read_metrics()
    selection = settings.selection_task
    summary = summarize_run(
        test, budget=config.steps, status=status.get("status"), status_step=status.get("step"),
        fixed_step=settings.fixed_step,
        selection=load_curve(run.eval_path(selection), allow_empty=diverged) if selection else None,
        collapse_fraction=config.collapse.fraction, collapse_confirm=config.collapse.confirm,
        train_metrics=train_metrics)
    return summary, pinned, test, train_metrics
