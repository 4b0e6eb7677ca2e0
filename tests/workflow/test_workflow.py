"""The Snakemake workflow, through the real `snakemake` CLI: lint, the job graph, profiles, bad configs.
(The reduced grid run end to end is in test_workflow_e2e.py.)"""
from __future__ import annotations

import re

import pytest
import yaml

from grid.config import load
from grid.expand import expand
from grid.folder import report_files
from grid.settings import Config
from harness import engine as engines
from tests.support.workflow_cli import ROOT, job_counts, planned_outputs, snakemake

pytestmark = pytest.mark.slow  # Snakemake calls (10-40 s each)

DEMO = load(ROOT / "config.yaml")


def test_lint_has_no_findings():
    result = snakemake("--lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_dry_run_of_the_demo_grid_lists_every_job(scratch):
    result = snakemake("-n", "-C", f"results_dir={scratch}")
    assert result.returncode == 0, result.stderr
    # the demo declares a seed schedule: the plan holds its first look (every cell at seeds[:3]) and the
    # interim job after it, whose output adds the next look's runs
    runs = Config.build(DEMO).first_look()
    assert len(runs) == len(DEMO["recipes"]) * len(DEMO["lags"]) * DEMO["seeding"]["looks"][0] < len(expand(DEMO))
    # one train and one evaluate job per cell (the tiny engine packs a look's runs: grid.jobs.run_packs)
    cells = sorted({(r, lag) for r, lag, _ in runs})
    assert job_counts(result.stdout) == {"grid_config": 1, "prepare": 1, "null_check": 1, "train": len(cells),
                                         "evaluate": len(cells), "look": 1, "aggregate": 1, "track": 1, "all": 1}
    look_seeds = sorted({s for _, _, s in runs})
    assert sorted(planned_outputs(result.stdout, "train")) == sorted(
        [f"{scratch}/demo/runs/{r}/lag{lag}/seed{s}/train/status.json" for s in look_seeds] for r, lag in cells)
    # Each evaluate job scores every task the config names (the test task, and a selection task if any).
    tasks = DEMO["eval"]["tasks"] + ([DEMO["eval"]["selection_task"]] if DEMO["eval"].get("selection_task") else [])
    assert sorted(planned_outputs(result.stdout, "evaluate")) == sorted(
        [f"{scratch}/demo/runs/{r}/lag{lag}/seed{s}/eval/{task}.jsonl" for s in look_seeds for task in tasks]
        for r, lag in cells)
    # The aggregate rule declares exactly the files analysis.aggregate writes.
    aggregate = re.search(r"^(?:local)?rule aggregate:\n(?:    .*\n)*?    output: (.*)$", result.stdout, re.MULTILINE)
    assert sorted(aggregate.group(1).split(", ")) == sorted(f"{scratch}/demo/{name}" for name in report_files("constant"))
    assert not scratch.joinpath("demo").exists(), "a dry run writes nothing"


def test_command_line_overrides_are_typed(scratch):
    result = snakemake("-n", "-C", f"results_dir={scratch}", "grid=quick", "recipes=[gspo]", "baseline=gspo", "lags=[3]", "claims=[]",
                       "seeds=[5,6]", "eval={tasks: [tiny_test], selection_task: null}")
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout) == {"grid_config": 1, "prepare": 1, "null_check": 1, "train": 1, "evaluate": 1,
                                         "aggregate": 1, "track": 1, "all": 1}
    assert planned_outputs(result.stdout, "evaluate") == [
        [f"{scratch}/quick/runs/gspo/lag3/seed{seed}/eval/tiny_test.jsonl" for seed in (5, 6)]]


@pytest.mark.parametrize(("override", "key"), [
    ("recipes=[grpo,no_such_recipe]", "recipes[1]"),
    ("lags=[1,-1]", "lags[1]"),  # lag 0 is the synchronous loop; a negative lag is nothing
    ("seeds=[]", "seeds"),
    ("collapse={fraction: 1.0}", "collapse.fraction"),
    ("collapse={fraction: 0}", "collapse.fraction"),
    ("eval={tasks: [no_such_task]}", "eval.tasks[0]"),
])
def test_bad_config_is_rejected_before_any_job_runs(scratch, override, key):
    # A real run (not -n): nothing may be scheduled, nothing written.
    result = snakemake("-c1", "-C", f"results_dir={scratch}", override, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"config key {key!r}" in output, output
    assert "Building DAG of jobs" not in output
    assert list(scratch.iterdir()) == []


def test_a_grid_beside_another_reads_its_summary_once_there(scratch):
    """config side_by_side (docs/statistics.md's command): the other grid's summary.json is an input of
    aggregate once it exists, so that a rerun of that grid re-renders this table; before, the grid plans."""
    command = ("-n", "-C", f"results_dir={scratch}", "grid=demo_interval", "lag_mode=interval",
               "side_by_side={grid: demo, label: constant lag}")
    inputs = []
    for there in (False, True):
        if there:
            (scratch / "demo").mkdir()
            (scratch / "demo" / "summary.json").write_text("{}")
        result = snakemake(*command)
        assert result.returncode == 0, result.stderr
        inputs.append(re.search(r"^rule aggregate:\n(?:    .*\n)*?    input: (.*)$", result.stdout, re.MULTILINE)
                      .group(1).split(", "))
    assert f"{scratch}/demo_interval/config.json" in inputs[0] and f"{scratch}/demo/summary.json" not in inputs[0]
    assert sorted(inputs[1]) == sorted([*inputs[0], f"{scratch}/demo/summary.json"])


def _resources(output: str, rule: str) -> list[str]:
    return re.findall(rf"^(?:local)?rule {rule}:\n(?:    .*\n)*?    resources: (.*)$", output, re.MULTILINE)


def test_slurm_profile_gives_cluster_jobs_their_gpus(scratch):
    result = snakemake("-n", "--profile", "workflow/profiles/slurm", "--configfile", "workflow/presets/table1.yaml",
                       "-C", f"results_dir={scratch}", "recipes=[grpo,sat_gspo_r3]", "seeds=[0]", "baseline=grpo",
                       "claims=[]")
    assert result.returncode == 0, result.stdout + result.stderr
    counts = job_counts(result.stdout)
    assert counts["train"] == 4 and counts["evaluate"] == 4 and "prepare" not in counts
    gpus = engines.get("slime").resources["train"]["gpu"]
    for line in _resources(result.stdout, "train"):
        assert f"gpu={gpus}" in line and "slurm_partition=gpu" in line and "runtime=" in line
    assert all("gpu=" not in line and "slurm_partition=cpu" in line for line in _resources(result.stdout, "aggregate"))


def test_slurm_profile_keeps_a_tiny_grid_on_the_cpu_partition(scratch):
    result = snakemake("-n", "--profile", "workflow/profiles/slurm", "-C", f"results_dir={scratch}", "seeds=[0]")
    assert result.returncode == 0, result.stderr
    for rule in ("prepare", "train", "evaluate", "aggregate", "track"):
        lines = _resources(result.stdout, rule)
        assert lines and all("slurm_partition=cpu" in line and "gpu" not in line for line in lines), rule
    # training asks for SLURM's time-limit warning (harness.engine.TIME_LIMIT_SIGNAL)
    assert all("slurm_extra=--signal=URG@" in line for line in _resources(result.stdout, "train"))


def test_train_jobs_stop_by_the_clock_at_the_warnings_lead(scratch):
    """engines.train --stop-lead: the warning's lead (the engine's --signal=URG@60 for tiny, a config's own),
    so that a job stops before its end time whether or not the signal reaches it (harness.engine)."""
    for extra, lead in ((None, "60"), ("--signal=B:URG@45", "45")):
        overrides = [f"resources={{'train': {{'slurm_extra': '{extra}'}}}}"] if extra else []
        result = snakemake("-n", "-p", "-C", f"results_dir={scratch}", "seeds=[0]", *overrides)
        assert result.returncode == 0, result.stderr
        trains = [line for line in result.stdout.splitlines() if "python -m engines.train" in line]
        assert trains and all(f"python -m engines.train --stop-lead {lead} --run-dir" in line for line in trains), trains


def test_table1_preset_runs_from_the_same_workflow(scratch):
    preset = yaml.safe_load((ROOT / "workflow/presets/table1.yaml").read_text())
    result = snakemake("-n", "--profile", "workflow/profiles/slurm", "--configfile", "workflow/presets/table1.yaml",
                       "-C", f"results_dir={scratch}")
    assert result.returncode == 0, result.stdout + result.stderr
    counts = job_counts(result.stdout)
    assert counts["train"] == len(preset["recipes"]) * len(preset["lags"]) * len(preset["seeds"])
    assert counts["aggregate"] == counts["track"] == 1 and counts["evaluate"] == counts["train"]  # one per run
    assert all("gpu=" in line for line in _resources(result.stdout, "train"))
