"""A damaged grid file (a copy cut short, a disk that filled mid-write elsewhere) is refused by every
command that reads it, naming the file: the grid's summary.json and config.json and a run's eval
jsonl, each through the stage entry points the workflow and a user call (in-process: the same
``main``). A damaged run config.json at DAG time and a cut metrics.jsonl are tested beside the
code that reads them (tests/harness/test_identity.py, tests/analysis/test_curves.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.cells.summary import collect
from analysis.claims.summary_file import write_summary
from analysis.report.write import summarize
from grid.folder import GridDir
from grid.settings import Config
from harness.io import write_json_atomic
from harness.run import RunDir
from tests.support.grid_fixture import make_grid
from tests.support.paths import ROOT

CUT_RUN = ("grpo", 8, 2)  # the run whose eval file is cut


@pytest.fixture(scope="module")
def grid_folder(tmp_path_factory):
    """A fabricated finished grid, aggregated (summary.json) and with its config.json written: every
    test cuts one file in a copy of it."""
    config = make_grid(tmp_path_factory.mktemp("damaged") / "results")
    grid = GridDir.of(config)
    write_json_atomic(grid.config_path, config)
    typed = Config.build(config)
    write_summary(grid.summary_path, summarize(typed, collect(typed, progress=False)))
    return config


@pytest.fixture
def grid(grid_folder):
    """The grid's folder (its results folder as it was: each test's cut undone, what it wrote removed)."""
    results = Path(grid_folder["results_dir"])
    kept = {path: path.read_bytes() for path in results.rglob("*") if path.is_file()}
    yield grid_folder
    for path in results.rglob("*"):
        if path.is_file() and path not in kept:
            path.unlink()
    for path, content in kept.items():
        path.write_bytes(content)


def cut(path: Path) -> Path:
    """``path`` cut to half its bytes, as a copy stopped part way leaves it."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def refused(capsys, main, argv: list[str]) -> str:
    """What a stage printed when it refused (exit 2: bad input, harness.cli; parser errors exit 2 too)."""
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's parser.error
        status = stop.code
    assert status == 2, status
    return capsys.readouterr().err


def looks_main(argv):
    from analysis.schedule.looks import main
    return main(argv)


def tuning_main(argv):
    from analysis.schedule.tune import main
    return main(argv)


def sync_main(argv):
    from tracking.sync import main
    return main(argv)


def compare_main(argv):
    from analysis.report.compare import main
    return main(argv)


def plan_main(argv):
    from analysis.claims.planning import main
    return main(argv)


def aggregate_main(argv):
    from analysis.aggregate import main
    return main(argv)


@pytest.fixture
def store(monkeypatch, grid) -> Path:
    """The grid's own MLflow store (tracking.store's default, under the results folder), not yet made."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = Path(grid["results_dir"]) / "mlflow.db"
    assert not path.exists()
    return path


def test_a_damaged_summary_is_named_by_track_compare_and_plan(grid, store, capsys):
    folder = GridDir.of(grid)
    summary = cut(folder.summary_path)
    expected = f"{summary}: not valid JSON"
    assert expected in refused(capsys, sync_main, ["--grid", str(folder.path)])
    assert expected in refused(capsys, compare_main, [str(folder.path), str(folder.path)])
    assert expected in refused(capsys, plan_main, [str(ROOT / "config.yaml"), "--from", str(folder.path),
                                                   "--replicates", "10"])
    assert not store.exists()  # refused before the store was opened


def test_a_damaged_grid_config_is_named_by_aggregate_and_track(grid, capsys):
    folder = GridDir.of(grid)
    config = cut(folder.config_path)
    summary = folder.summary_path.read_bytes()
    out = ["--out", str(folder.path / "not_written.json")]
    for main, extra in ((aggregate_main, []), (sync_main, []), (looks_main, ["--look", "1", *out]), (tuning_main, out)):
        message = refused(capsys, main, ["--grid", str(folder.path), *extra])
        assert f"{config}: not valid JSON" in message, message
    assert folder.summary_path.read_bytes() == summary  # aggregate wrote nothing


def test_a_foreign_or_missing_grid_folder_is_refused_naming_the_file(grid, tmp_path, capsys):
    """Another grid's config.json copied into a folder (a grid folder holds its own grid's config), and a
    folder that is no grid's: every stage refuses before any work, naming the file."""
    foreign = tmp_path / "other_grid"
    shutil.copytree(GridDir.of(grid).path, foreign)
    for main in (aggregate_main, sync_main):
        message = refused(capsys, main, ["--grid", str(foreign)])
        assert f"{foreign / 'config.json'}: the config of grid {grid['grid']!r}, not of this folder 'other_grid'" \
            in message, message
        message = refused(capsys, main, ["--grid", str(tmp_path)])
        assert f"{tmp_path / 'config.json'} does not exist: not a grid folder" in message, message
    assert not (foreign / "mlflow.json").exists()


def cut_eval_file(grid: dict) -> tuple[Path, str]:
    """A run's eval file cut, and the error that names it: its cut line, after the whole ones."""
    run = RunDir(GridDir.of(grid).path / "runs" / CUT_RUN[0] / f"lag{CUT_RUN[1]}" / f"seed{CUT_RUN[2]}")
    eval_file = cut(run.eval_path("tiny_test"))
    return eval_file, f"{eval_file}, line {eval_file.read_text().count(chr(10)) + 1}: not valid JSON"


def test_a_damaged_eval_file_is_named_by_aggregate(grid, capsys):
    folder = GridDir.of(grid)
    summary = folder.summary_path.read_bytes()
    _, expected = cut_eval_file(grid)
    message = refused(capsys, aggregate_main, ["--grid", str(folder.path)])
    assert expected in message, message
    assert folder.summary_path.read_bytes() == summary


@pytest.mark.slow  # an MLflow store made (~50 s on a loaded 2-core box)
def test_a_damaged_eval_file_is_named_by_track(grid, store, capsys):
    _, expected = cut_eval_file(grid)
    assert expected in refused(capsys, sync_main, ["--grid", str(GridDir.of(grid).path)])
