"""analysis.report.machines: the report says when a table's runs come from different commits or machines,
and sums each rule's Snakemake benchmark files."""
from __future__ import annotations

from analysis.report.machines import sections
from analysis.report.render import markdown
from grid.config import validate
from grid.settings import Config
from harness.io import write_json_atomic

# Snakemake's benchmark file: a header and one line per job run.
TSV = ("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
       "{wall}\t0:00:01\t{rss}\t1.0\t1.0\t1.0\t0\t0\t50.0\t{cpu}\n")
MACHINE = {"host": "a", "cpu_model": "Xeon", "cpu_capability": "AVX512", "torch": "2.13.0+cpu", "git_commit": "1" * 40,
           "git_dirty": False, "stalebench": "0.1.0", "python": "3.11.7", "lm_eval": "0.4.13",
           "requirements_lock_sha256": "f" * 64}


def grid(tmp_path) -> Config:
    return Config.build(validate({"grid": "g", "results_dir": str(tmp_path), "engine": "tiny", "recipes": ["grpo", "gspo"],
                                  "lags": [1], "seeds": [0, 1], "steps": 20, "eval_every": 5, "claims": [], "baseline": "grpo",
                                  "engine_params": {"preset": "demo"}, "eval": {"tasks": ["tiny_test"]}}))


def record(config, recipe, seed, *attempts):
    write_json_atomic(config.folder.run(recipe, 1, seed).path / "provenance.json", {"attempts": list(attempts)})


def test_one_commit_and_one_machine_are_said_once(tmp_path):
    config = grid(tmp_path)
    for recipe in config.recipes:
        for seed in config.seeds:
            record(config, recipe, seed, MACHINE)
    text = "\n".join(markdown(sections(config)))
    assert "All runs on one commit: 1111111111." in text
    assert "All runs on one machine: a (Xeon, torch kernels AVX512, torch 2.13.0+cpu)." in text
    assert "come from" not in text and "## Compute per rule" not in text  # no benchmark files yet


def test_runs_from_other_commits_or_machines_are_named(tmp_path):
    config = grid(tmp_path)
    record(config, "grpo", 0, MACHINE)
    record(config, "grpo", 1, {**MACHINE, "git_dirty": True})
    # killed on one machine, finished on another: the run counts for both
    record(config, "gspo", 0, MACHINE, {**MACHINE, "host": "b", "cpu_capability": "AVX2"})
    config.folder.run("gspo", 1, 1).path.mkdir(parents=True)  # trained before provenance was recorded
    text = "\n".join(markdown(sections(config)))
    assert "**The runs of this table come from 2 commits**" in text
    assert "- 1111111111 + uncommitted changes: 1 run(s): grpo/lag1/seed1" in text
    assert "**The runs of this table come from 2 machines**" in text
    assert "- b (Xeon, torch kernels AVX2, torch 2.13.0+cpu): 1 run(s): gspo/lag1/seed0" in text
    assert "1 run(s) have no provenance.json" in text and "gspo/lag1/seed1" in text


def test_benchmarks_are_summed_per_rule(tmp_path):
    config = grid(tmp_path)
    root = tmp_path / "g" / "logs" / "benchmarks"
    for i, (wall, cpu, rss) in enumerate([(10.0, 9.0, 300.0), (30.0, 20.0, 500.0), (20.0, "NA", 400.0)]):
        path = root / "train" / "grpo" / "lag1" / f"seed{i}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TSV.format(wall=wall, cpu=cpu, rss=rss))
    (root / "aggregate.tsv").write_text(TSV.format(wall=5.0, cpu=4.0, rss="-"))
    rows = {row["rule"]: row for row in config.folder.job_costs()}
    assert rows["train"] == {"rule": "train", "jobs": 3, "wall_s": 60.0, "median_wall_s": 20.0, "cpu_s": 29.0,
                             "peak_rss_mb": 500.0}
    assert rows["aggregate"]["peak_rss_mb"] is None and set(rows) == {"train", "aggregate"}
    assert "| train | 3 | 60.0 | 20.00 | 29.0 | 500 |" in "\n".join(markdown(sections(config)))
