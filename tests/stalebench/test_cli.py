"""The `stalebench` command (stalebench/cli.py, stalebench/workflow.py): one command with a subcommand per
tool a person uses; `stalebench run` takes over what a killed workflow left and refuses a live one."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness.cli import EXIT_LOCKED
from harness.lock import writer_lock
from stalebench import cli, workflow
from tests.support.paths import ROOT

STALEBENCH = str(Path(sys.executable).with_name("stalebench"))


def test_the_help_lists_every_subcommand():
    said = subprocess.run([STALEBENCH, "--help"], capture_output=True, text=True, timeout=60)
    assert said.returncode == 0
    for name in ("run", "check", "rerun", "design", "ui", "cluster"):
        assert f"\n    {name} " in said.stdout, said.stdout


def test_a_subcommand_calls_its_tool_with_the_rest_of_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "config.yaml").read_text()
    bad.write_text(text.replace("recipes: [grpo, gspo, gspo_mu, sat_gspo]", "recipes: [grpo, gspo, gspo_mu, sat_gpso]"))
    line = text.splitlines().index("recipes: [grpo, gspo, gspo_mu, sat_gspo]") + 1
    assert cli.main(["check", str(bad)]) == 2  # grid.config's own exit status
    said = capsys.readouterr().err
    assert "unknown recipe 'sat_gpso' (did you mean sat_gspo?)" in said and said.rstrip().endswith(f"({bad}, line {line})")
    said = subprocess.run([STALEBENCH, "nope"], capture_output=True, text=True, timeout=60)
    assert said.returncode == 2 and "invalid choice: 'nope'" in said.stderr


def test_options_are_read_in_each_form_snakemake_takes():
    args = ["-c2", "--configfile", "a.yaml", "--configfile=b.yaml", "-d", "w", "--directory=x"]
    assert workflow.option(args, "--configfile") == ["a.yaml", "b.yaml"]
    assert workflow.option(args, "-d", "--directory") == ["w", "x"]
    assert workflow.option(["-dw"], "-d") == ["w"] and workflow.option(["-n"], "-d") == []


def test_a_line_of_snakemakes_output_loses_the_projects_paths_and_the_traceback():
    where = f'WorkflowError in file "{workflow.ROOT}/workflow/rules/common.smk", line 42:\n'
    assert workflow.quiet(where, verbose=False) == "WorkflowError:\n"
    assert workflow.quiet(where, verbose=True) == where
    assert workflow.quiet("Traceback (most recent call last):\n", verbose=False) is None
    assert workflow.quiet(f'  File "{workflow.ROOT}/Snakefile", line 46, in <module>\n', verbose=False) is None
    assert workflow.quiet("Job stats:\n", verbose=False) == "Job stats:\n"


def test_what_a_dead_workflow_left_is_found(tmp_path):
    assert workflow.left_behind(tmp_path) == []
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    assert workflow.left_behind(tmp_path) == []  # an empty folder: Snakemake's own after a clean end
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    (tmp_path / ".snakemake" / "incomplete").mkdir()
    (tmp_path / ".snakemake" / "incomplete" / "b64name").write_text("")
    assert workflow.left_behind(tmp_path) == ["locks", "incomplete"]


def test_a_live_snakemake_in_the_folder_is_seen_and_one_elsewhere_is_not(tmp_path):
    fake = tmp_path / "bin" / "snakemake"  # a process whose program is called snakemake
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    fake.chmod(0o755)
    (tmp_path / "work").mkdir()
    process = subprocess.Popen([str(fake)], cwd=tmp_path / "work")
    try:
        deadline = time.monotonic() + 30
        while process.pid not in workflow.live_snakemake(tmp_path / "work") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.pid in workflow.live_snakemake(tmp_path / "work")
        assert process.pid not in workflow.live_snakemake(tmp_path)
    finally:
        process.kill()
        process.wait()


def test_a_second_run_beside_a_live_one_is_refused_naming_it(tmp_path, capsys):
    with writer_lock(tmp_path / ".snakemake" / "stalebench.lock", "stalebench run"):
        assert workflow.run(["-c1", "-d", str(tmp_path)]) == EXIT_LOCKED
    said = capsys.readouterr().err
    assert "stalebench run: error:" in said and f"pid {os.getpid()}" in said


def test_runs_help_says_what_it_adds_to_snakemake(capsys):
    assert workflow.run(["--help"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("usage: stalebench run [SNAKEMAKE OPTIONS]") and "--rerun-incomplete" in said


def test_the_clusters_plan_is_a_subcommand(capsys):
    assert cli.main(["cluster", "plan", str(ROOT / "workflow" / "presets" / "table1.yaml")]) == 0
    assert capsys.readouterr().out.startswith("plan: 84 training jobs")  # engines.slime.launch --plan's report
