"""Messages that name their cause (issue 51): a config file's YAML syntax error names the file, its line
and column (Snakemake's own names neither); an MLflow tracking server that is not there fails in
seconds, naming its URI, with the grid untouched; a request narrower than a finished grid's table says
what the table holds and how to get the narrowed one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.config import ConfigError, read_file
from harness.config import main as check_config
from tests.support.grid_fixture import make_grid
from tests.support.ports import refused_url
from tests.support.workflow_cli import ROOT, SNAKEMAKE, copy_checkout, snakemake

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
    assert f"config file {bad}, line 4, column 1" not in said  # harness.config's message: the project never ran


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


SMALL = {"grid": "narrowed", "recipes": ["grpo"], "baseline": "grpo", "lags": [1], "seeds": [0, 1], "claims": [],
         "seeding": None, "steps": 4, "eval_every": 2, "engine_params": {"preset": "demo", "warmstart_steps": 10},
         "eval": {"tasks": ["tiny_test"], "selection_task": None, "k": 2, "problems": {"tiny_test": 8}}}


@pytest.mark.slow  # a grid trained by Snakemake
@pytest.mark.timeout(900)
def test_a_narrowed_request_over_a_finished_grid_says_what_the_table_holds(tmp_path):
    results, state = tmp_path / "results", tmp_path / "state"
    args = ["-C", f"results_dir={results}", *(f"{key}={json.dumps(value)}" for key, value in SMALL.items())]
    done = snakemake("-c2", *args, workdir=state, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stalebench: note" not in done.stderr  # the request is what the table holds
    shutil.rmtree(state / ".snakemake")  # Snakemake's records gone (a copied grid, a new checkout)
    again = snakemake("-c2", *args, "seeds=[0]", workdir=state)
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "Nothing to be done" in said, said[-3000:]
    table = results / "narrowed" / "table.md"
    assert (f"stalebench: note: {table} holds the grid as last aggregated: recipes ['grpo'], lags [1], seeds [0, 1]; "
            "this request names seeds [0].") in said
    assert "add -C grid=narrowed_narrowed" in said and "add --forcerun grid_config" in said
    forced = snakemake("-c2", *args, "seeds=[0]", "--forcerun", "grid_config", workdir=state)  # the advice taken
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert json.loads((results / "narrowed" / "summary.json").read_text())["seeds"] == [0]
