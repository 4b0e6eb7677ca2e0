"""grid.folder: GridDir owns the grid folder's paths, and no module outside harness/ spells them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grid.folder import MLFLOW_MARKER, REPORT_FILES, RERUN, SUMMARY, TRACKING_LOCK, TUNING_PICK, GridDir
from harness.run import CONFIG as RUN_CONFIG
from harness.run import ENGINE_FILES, FINGERPRINT, METRICS, PROVENANCE, STATUS, RunDir
from tests.support.paths import ROOT

CONFIG = {"grid": "g", "results_dir": "/r"}


def test_the_grid_folders_paths():
    grid = GridDir.of(CONFIG)
    assert grid.path == Path("/r/g")
    assert (grid.config_path, grid.summary_path, grid.mlflow_path, grid.tracking_lock_path) == (
        Path("/r/g/config.json"), Path("/r/g/summary.json"), Path("/r/g/mlflow.json"), Path("/r/g/tracking.lock"))
    assert (grid.base_dir, grid.logs_dir, grid.benchmarks_dir) == (
        Path("/r/g/base"), Path("/r/g/logs"), Path("/r/g/logs/benchmarks"))
    assert grid.table_path("md") == Path("/r/g/table.md") and grid.plot_path("curves") == Path("/r/g/curves.png")
    assert grid.tuning_path == Path("/r/g/tuning.json")
    assert [path.name for path in grid.report_paths()] == list(REPORT_FILES) and REPORT_FILES[-1] == SUMMARY


def test_a_run_of_the_grid_is_the_run_folder_the_grid_lays_out():
    run = GridDir.of(CONFIG).run("grpo", 8, 2)
    assert isinstance(run, RunDir) and run.path == Path("/r/g/runs/grpo/lag8/seed2")
    assert run.grid_dir == Path("/r/g")  # RunDir's way back up agrees


def test_an_unknown_report_file_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="no table format 'html'; the report writes md, csv, tex"):
        GridDir("/r/g").table_path("html")
    with pytest.raises(ValueError, match="no plot 'bars'"):
        GridDir("/r/g").plot_path("bars")


def test_reading_a_damaged_config_names_the_file(tmp_path):
    grid = GridDir(tmp_path)
    grid.config_path.write_text("{cut")
    with pytest.raises(ValueError, match=f"{grid.config_path}: not valid JSON"):
        grid.read_config()


GRID_FILES = (SUMMARY, MLFLOW_MARKER, TRACKING_LOCK, TUNING_PICK, RERUN, *REPORT_FILES)
# A run folder's files (harness.run), the engines' own among them where the name is a file's (the
# folder roles, "megatron", "hf", are also the names of packages and source trees).
RUN_FILES = (RUN_CONFIG, PROVENANCE, STATUS, METRICS, FINGERPRINT, "run_config.json",
             *(name for name in ENGINE_FILES.values() if "." in name))
# The modules that read or write a model checkpoint, whose own config.json (the model's, an HF
# layout) shares the run config's file name.
MODEL_CHECKPOINT_MODULES = {"engines/tiny/__init__.py", "engines/tiny/checkpoint.py", "engines/tiny/warmstart.py",
                            "eval/lm_model.py", "eval/server.py", "engines/slime/params.py"}


def spelled_in_code(path: Path, names: tuple[str, ...] = GRID_FILES) -> set[str]:
    """The grid file names a module uses as a path: a string literal (or an f-string's literal part)
    that is the name or ends in /name; prose that mentions one ("as in table.md") is no path. In a
    rule file: any line but a comment."""
    if path.suffix != ".py":
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        return {name for name in names if name in code}
    literals = [node.value for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return {name for name in names if any(text == name or text.endswith(f"/{name}") for text in literals)}


def test_only_grid_folder_spells_a_grid_folders_file_names():
    """Every stage, rule file and benchmark reaches the grid folder's files through GridDir."""
    sources = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".smk") or p.name in ("Snakefile", "Makefile")]
    sources = [p for p in sources if p.is_file() and not p.relative_to(ROOT).parts[0].startswith((".", "tests"))]
    spelled = {str(p.relative_to(ROOT)): names for p in sources if (names := spelled_in_code(p))}
    assert spelled.keys() == {"grid/folder.py"}, spelled


def test_an_engines_own_files_are_named_by_role():
    run = RunDir("/r/g/runs/grpo/lag1/seed0")
    assert run.engine_file("job_script") == run.train_dir / "job.sh"
    assert run.engine_file("resume_checkpoints") == run.train_dir / "megatron"
    with pytest.raises(ValueError, match="no engine file 'jobscript'.*job_script"):
        run.engine_file("jobscript")


def test_only_harness_spells_a_run_folders_file_names():
    """Every engine, stage and benchmark reaches a run's files through RunDir (ENGINE_FILES for an
    engine's own); a model checkpoint's config.json is the model's, not the run's."""
    sources = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".smk") or p.name in ("Snakefile", "Makefile")]
    sources = [p for p in sources if p.is_file() and not p.relative_to(ROOT).parts[0].startswith((".", "tests", "harness"))]
    spelled = {}
    for path in sources:
        names = spelled_in_code(path, RUN_FILES)
        if str(path.relative_to(ROOT)) in MODEL_CHECKPOINT_MODULES | {"grid/folder.py"}:  # the grid's own config.json
            names -= {RUN_CONFIG}
        if names:
            spelled[str(path.relative_to(ROOT))] = names
    assert spelled == {}, spelled


def test_the_spelling_check_sees_a_path_and_spares_prose(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Writes summary.json."""\ndef f(grid, out):\n    """Reads table.md."""\n'
                      '    note = "scores as in table.csv"\n    return grid / "mlflow.json", f"{out}/curves.png"\n')
    assert spelled_in_code(module) == {"mlflow.json", "curves.png"}
    rule = tmp_path / "r.smk"
    rule.write_text('# the summary.json of the grid\nrule a:\n    output: "x/table.csv"\n')
    assert spelled_in_code(rule) == {"table.csv"}
