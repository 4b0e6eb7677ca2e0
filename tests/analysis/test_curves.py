"""Per-run metrics: fixed/best/selected scores, AUC against known areas, the collapse rule, d-bar."""
import math

import pytest

from analysis.cells.curves import auc, load_curve, mismatch_tail, read_run, summarize_run
from grid.folder import GridDir
from grid.settings import Config
from harness.io import append_jsonl_atomic
from tests.support.grid_fixture import COLLAPSED, DIVERGE_STEP, DIVERGED, STEPS, make_grid, written_grid

CURVE = [(5, 0.2), (10, 0.6), (15, 0.4), (20, 0.5)]


def test_scores_fixed_best_selected():
    selection = [(5, 0.1), (10, 0.2), (15, 0.9), (20, 0.3)]
    s = summarize_run(CURVE, budget=20, selection=selection)
    assert (s.fixed_step, s.fixed) == (20, 0.5)  # default: the last evaluated step
    assert (s.best_step, s.best) == (10, 0.6)
    assert (s.selected_step, s.selected) == (15, 0.4)  # test score where validation is best
    assert summarize_run(CURVE, budget=20, fixed_step=15).fixed == 0.4
    assert summarize_run(CURVE, budget=20).selected is None
    with pytest.raises(ValueError, match="fixed_step"):
        summarize_run(CURVE, budget=20, fixed_step=12)


def test_ties_go_to_the_earliest_step():
    s = summarize_run([(5, 0.5), (10, 0.5)], budget=10, selection=[(5, 0.3), (10, 0.3)])
    assert s.best_step == 5 and s.selected_step == 5


def test_auc_known_areas():
    assert auc([(0, 0.3), (10, 0.3)], 10) == pytest.approx(0.3)  # constant curve
    assert auc([(0, 0.0), (10, 1.0)], 10) == pytest.approx(0.5)  # a ramp: triangle
    # trapezoids by hand: (0.2+0.6)/2*5 + (0.6+0.4)/2*5 + (0.4+0.5)/2*5 = 6.75 over [5, 20] (15 steps)
    assert auc(CURVE, 20) == pytest.approx(6.75 / 15)
    # last evaluation before the budget: its score is held to the budget
    assert auc([(5, 0.2), (10, 0.4)], 20) == pytest.approx((0.3 * 5 + 0.4 * 10) / 15)
    # diverged at step 12 after a checkpoint at 10: 0.4 held to 12, a drop to 0, then 0 through 20
    assert auc([(5, 0.2), (10, 0.4)], 20, diverged=True, diverged_at=12) == pytest.approx(
        (0.3 * 5 + 0.4 * 2) / 15)
    # divergence step unknown: the drop comes right after the last checkpoint
    assert auc([(5, 0.2), (10, 0.4)], 20, diverged=True) == pytest.approx(0.3 * 5 / 15)
    with pytest.raises(ValueError, match="beyond the step budget"):
        auc([(5, 0.2), (30, 0.4)], 20)


@pytest.mark.parametrize("curve, collapsed, step", [
    ([0.4, 0.5, 0.2, 0.1], True, 15),      # falls below 0.25 and stays
    ([0.4, 0.5, 0.2, 0.3], False, None),   # recovers above half the peak
    ([0.4, 0.5, 0.26, 0.25], False, None), # exactly half the peak is not below it
    ([0.4, 0.5, 0.1, 0.3, 0.2], True, 25), # dipped, recovered, then fell for good: stretch starts at 25
    ([0.0, 0.0, 0.0], False, None),        # peak 0: nothing to fall from
    ([0.1, 0.2, 0.5], False, None),        # peak is last
])
def test_collapse_rule(curve, collapsed, step):
    s = summarize_run([(5 * (i + 1), v) for i, v in enumerate(curve)], budget=5 * len(curve))
    assert (s.collapsed, s.collapse_step) == (collapsed, step)


def test_collapse_fraction_is_the_configured_one():
    curve = [(5, 0.5), (10, 0.3)]
    assert not summarize_run(curve, budget=10, collapse_fraction=0.5).collapsed
    assert summarize_run(curve, budget=10, collapse_fraction=0.7).collapsed
    with pytest.raises(ValueError, match="collapse.fraction"):
        summarize_run(curve, budget=10, collapse_fraction=1.0)


def test_diverged_run_scores_zero_after_divergence():
    s = summarize_run([(5, 0.4), (10, 0.5)], budget=20, status="diverged", status_step=12)
    assert s.collapsed and s.collapse_step == 12
    assert (s.fixed_step, s.fixed) == (20, 0.0)
    assert s.best == 0.5
    with pytest.raises(ValueError, match="did not diverge"):
        summarize_run([], budget=20)
    with pytest.raises(ValueError, match="cannot be scored"):
        summarize_run(CURVE, budget=20, status="failed")


def test_mismatch_tail_uses_last_ten_percent_and_skips_nan():
    rows = [{"step": i, "d/mean_abs": float(i), "d/p99": 10.0 * i} for i in range(1, 21)]
    assert mismatch_tail(rows) == (pytest.approx(19.5), pytest.approx(195.0))  # steps 19, 20
    rows[-1]["d/mean_abs"] = math.nan
    assert mismatch_tail(rows)[0] == pytest.approx(19.0)
    assert all(math.isnan(v) for v in mismatch_tail([]))


def test_read_run_on_fabricated_grid(tmp_path):
    config = Config.build(make_grid(tmp_path))
    s, pinned, curve, train = read_run(config.folder.run(*COLLAPSED), config)
    assert s.collapsed and s.collapse_step == 15 and pinned.recipe.name == "grpo" and pinned.run_key
    assert [v for _, v in curve] == [0.40, 0.50, 0.20, 0.10]
    assert [row["step"] for row in train] == list(range(1, STEPS + 1))
    assert s.selected_step == 5  # validation is best one checkpoint before the test peak (10)
    d, _, _, _ = read_run(config.folder.run(*DIVERGED), config)
    assert d.status == "diverged" and d.collapse_step == DIVERGE_STEP and d.fixed == 0.0
    assert math.isfinite(d.dbar)  # the NaN at the diverging step is left out


def test_bad_eval_file_is_named(tmp_path):
    path = tmp_path / "eval" / "t.jsonl"
    with pytest.raises(FileNotFoundError, match="t.jsonl"):
        load_curve(path)
    append_jsonl_atomic(path, [{"step": 5, "score": 0.1}, {"step": 5, "score": 0.2}])
    with pytest.raises(ValueError, match="evaluated twice"):
        load_curve(path)


def test_diverged_before_first_checkpoint_scores_zero():
    s = summarize_run([], budget=20, status="diverged", status_step=3, selection=[],
                      train_metrics=[{"step": 1, "d/mean_abs": 0.2, "d/p99": 0.9}])
    assert (s.fixed, s.best, s.selected, s.auc, s.best_step) == (0.0, 0.0, 0.0, 0.0, None)
    assert s.collapsed and s.collapse_step == 3 and s.dbar == 0.2


def test_a_cut_last_line_of_metrics_stops_aggregate_naming_the_file(tmp_path, capsys):
    """A metrics file whose last line was cut (a disk error, a bad copy) is named, with its line."""
    from analysis.aggregate import main

    config = make_grid(tmp_path)
    run = GridDir.of(config).run(*COLLAPSED)
    text = run.metrics_path.read_text()
    run.metrics_path.write_text(text[:-40])  # the last row loses its end (and its newline)
    assert main(["--grid", written_grid(config)]) == 2
    message = capsys.readouterr().err
    assert f"{run.metrics_path}, line {STEPS}: not valid JSON" in message, message
