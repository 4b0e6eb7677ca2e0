"""Messages that name their cause (issue 51): a config file's YAML syntax error names the file, its line
and column (Snakemake's own names neither); an MLflow tracking server that is not there fails in
seconds, naming its URI, with the grid untouched (a request that reads a finished grid another way:
tests/workflow/test_workflow_design.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grid.config import ConfigError, read_file
from grid.config import main as check_config
from tests.support.grid_fixture import make_grid
from tests.support.ports import refused_url
from tests.support.workflow_cli import ROOT, SNAKEMAKE, copy_checkout

TAB = "grid: demo\nlags:\n  - 1\n\t- 8\n"  # a tab where YAML wants spaces: line 4, column 1
UNCLOSED = "grid: demo\nlags: [1, 8\nseeds: [0]\n"  # the list of line 2, column 7 runs into line 3's key


@pytest.mark.parametrize(("text", "where", "cause"), [
    (TAB, "line 4, column 1", "replace the tab by spaces"),
    (UNCLOSED, "line 3, column 6", "flow sequence opened at line 2, column 7")])
def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path, capsys, text, where, cause):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        read_file(path)
    assert f"config file {path}, {where}: not valid YAML" in str(error.value) and cause in str(error.value)
    assert check_config([str(path)]) == 2  # `make demo CONFIG=...` checks a --configfile this way first
    assert f"{path}, {where}" in capsys.readouterr().err


def test_the_workflow_names_config_yaml_and_its_line_not_the_snakefile(tmp_path):
    code = copy_checkout(tmp_path / "code")
    config = code / "config.yaml"
    config.write_text(config.read_text().replace("lags: [1, 8]", "lags: [1, 8", 1))
    line = config.read_text().splitlines().index("lags: [1, 8") + 1
    result = subprocess.run([SNAKEMAKE, "-n", "-c1"], cwd=code, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    said = result.stdout + result.stderr  # Snakemake prints its errors on stdout
    assert f"config file {config}, line {line + 1}" in said, said[-2000:]
    assert f"flow sequence opened at line {line}, column 7" in said and "not valid JSON or YAML" not in said


def test_a_bare_configfile_gets_snakemakes_message_before_any_project_code(tmp_path):
    """Why the README sends a config file of one's own through `make demo CONFIG=FILE` (which names its line, the
    first test): Snakemake 9 parses a --configfile in its command line (ConfigSettings) before it reads the
    Snakefile, so no project code can name the file's line. Fails once a Snakemake lets the Snakefile run first."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(TAB)
    result = subprocess.run([SNAKEMAKE, "-n", "-c1", "-s", str(ROOT / "Snakefile"), "--configfile", str(bad)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "Config file is not valid JSON or YAML" in said, said[-2000:]
    assert f"config file {bad}, line 4, column 1" not in said  # grid.config's message: the project never ran


def test_an_unreachable_tracking_server_fails_in_seconds_naming_it_and_touches_nothing(tmp_path):
    config = make_grid(tmp_path / "results")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with refused_url() as uri:  # a port nobody listens on, nor can while the test runs
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
        start = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "tracking.sync", "--config", str(tmp_path / "config.yaml"), "--live"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - start
        assert result.returncode != 0 and f"the MLflow tracking server {uri}" in result.stderr, result.stderr[-2000:]
        assert seconds < 30, f"{seconds:.0f} s to give up on {uri}"  # MLflow's own retries: ~4 minutes
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no lock, no marker
        ui = subprocess.run([sys.executable, "-m", "tracking.ui", "--config", str(tmp_path / "config.yaml")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert ui.returncode != 0 and f"the MLflow tracking server {uri}" in ui.stderr, ui.stderr[-2000:]


def test_a_file_that_is_not_there_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"config file not found: {Path(tmp_path / 'none.yaml')}"):
        read_file(tmp_path / "none.yaml")


@pytest.mark.slow  # Snakemake reads the workflow
def test_an_unknown_recipe_is_refused_naming_the_line_and_the_nearest_name_without_a_traceback(tmp_path):
    """Issue 64: `recipes: [..., sat_gpso]` in config.yaml, through `stalebench run` (Snakemake's own refusal)."""
    code = copy_checkout(tmp_path / "code")
    config = code / "config.yaml"
    config.write_text(config.read_text().replace("gspo_mu, sat_gspo]", "gspo_mu, sat_gpso]", 1))
    line = next(n for n, text in enumerate(config.read_text().splitlines(), 1) if "sat_gpso" in text)
    stalebench = [str(Path(sys.executable).with_name("stalebench")), "run", "-c1", "-n"]
    env = {**os.environ, "PYTHONPATH": str(code)}
    result = subprocess.run(stalebench, cwd=code, env=env, capture_output=True, text=True, timeout=300)
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "unknown recipe 'sat_gpso' (did you mean sat_gspo?)" in said, said[-3000:]
    assert said.rstrip().endswith(f"(config.yaml, line {line})"), said[-3000:]  # the cause, then where, last
    assert "Traceback" not in said and f"{code}/workflow" not in said and f"{code}/Snakefile" not in said
    verbose = subprocess.run([*stalebench, "--verbose"], cwd=code, env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" in verbose.stdout + verbose.stderr  # asked for


@pytest.mark.slow  # Snakemake reads the workflow
def test_a_shipped_file_a_job_reads_is_checked_before_the_first_job_naming_it(tmp_path):
    """Issue 64: nothing the project ships lives in the output folder (`rm -rf results` keeps the paper's table),
    and a shipped input that is missing is named by the plan, not by a job after hours of training."""
    code = copy_checkout(tmp_path / "code")
    assert not any(path.is_file() for path in (code / "results").rglob("*"))  # the output folder ships nothing
    (code / "workflow" / "reference" / "table1.csv").unlink()
    result = subprocess.run([SNAKEMAKE, "-n", "-c1"], cwd=code, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(code)})
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "workflow/reference/table1.csv" in said, said[-3000:]
    assert "Job stats" not in said  # refused while planning: no job ran
