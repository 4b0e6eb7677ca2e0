"""A rerun that checks a grid's claims (analysis.schedule.rerun): fresh declared seeds, the normal workflow
on the first grid's config, and the two outcomes per claim beside the first run's printed probability.
The workflow call is replaced here by fabricating the new grid's runs (tests/support/grid_fixture.py);
the real training path: tests/workflow/test_workflow_seeding.py (slow)."""
import json

import pytest

from analysis.aggregate import main as aggregate
from analysis.claims.summary_file import Summary
from analysis.claims.verdict import Verdict
from analysis.schedule import rerun
from grid.claims import StalenessCost
from grid.config import validate
from grid.folder import GridDir
from grid.settings import Config
from tests.support.aggregated_grid import aggregated_grid
from tests.support.grid_fixture import CLAIMS, make_grid, written_grid


@pytest.fixture()
def first(tmp_path, run_folder):
    config = aggregated_grid(run_folder, tmp_path)
    return GridDir.of(config).path, config


def test_the_fresh_seeds_are_as_many_as_declared_and_above_every_one_used(first):
    _, config = first
    assert rerun.fresh_seeds(Config.build(config)) == [3, 4, 5]
    # non-contiguous, the largest not last: from the largest (9), not the last (2)
    assert rerun.fresh_seeds(Config.build(validate({**config, "seeds": [7, 9, 0, 2]}))) == [10, 11, 12, 13]


def test_the_workflow_call_is_the_first_grids_config_with_the_new_name_folder_and_seeds(first, tmp_path):
    folder, config = first
    declared = rerun.declare(Config.build(config), folder, tmp_path / "again", "avx2")
    call = rerun.command(folder, declared, 2, ["-n"])
    assert call[call.index("--configfile") + 1] == str(folder / "config.json") and "-c2" in call and call[-1] == "-n"
    overrides = call[call.index("-C") + 1:-1]
    assert overrides == ["grid=again", f"results_dir={tmp_path}", "seeds=[3, 4, 5]", "side_by_side=null"]
    assert declared["environment"] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert json.loads(GridDir(tmp_path / "again").rerun_path.read_text())["seeds"] == [3, 4, 5]  # declared first
    with pytest.raises(ValueError, match="declares another rerun"):  # the same folder for another kernel
        rerun.declare(Config.build(config), folder, tmp_path / "again", "default")
    with pytest.raises(ValueError, match="a new one"):
        rerun.declare(Config.build(config), folder, folder, "default")


def test_the_command_prints_both_outcomes_and_the_printed_probability_per_claim(first, tmp_path, monkeypatch, capsys):
    folder, config = first
    calls = []

    def workflow(call, env, check):  # what the real workflow leaves: the new grid's runs, aggregated
        calls.append((call, env))
        declared = json.loads((tmp_path / "again" / "rerun.json").read_text())
        second = validate({**make_grid(tmp_path, grid="again", seeds=tuple(declared["seeds"])), "claims": CLAIMS})
        assert aggregate(["--grid", written_grid(second)]) == 0
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(rerun.subprocess, "run", workflow)
    assert rerun.main(["--grid", str(folder), "--out", str(tmp_path / "again"), "--kernel", "avx2"]) == 0
    assert calls[0][1]["ATEN_CPU_CAPABILITY"] == "avx2"
    out = capsys.readouterr().out
    first_claims = {c["name"]: c for c in json.loads((folder / "summary.json").read_text())["claims"]}
    second_claims = {c["name"]: c for c in json.loads((tmp_path / "again" / "summary.json").read_text())["claims"]}
    for name, claim in first_claims.items():
        assert (f"| {name} | {claim['verdict']} ({claim['look']}) | {claim['replication']:.2f} | "
                f"{second_claims[name]['verdict']} ({second_claims[name]['look']}) |") in out
    saved = json.loads((tmp_path / "again" / "rerun.json").read_text())
    same = sum(first_claims[n]["verdict"] == second_claims[n]["verdict"] for n in first_claims)
    assert saved["comparison"]["same"] == same and f"{same} of {len(CLAIMS)} outcomes repeated" in out
    assert saved["comparison"]["expected_same"] == pytest.approx(sum(c["replication"] for c in first_claims.values()))
    assert saved["comparison"]["seeds"] == [[0, 1, 2], [3, 4, 5]]


def test_a_dry_run_plans_and_writes_nothing(first, tmp_path, monkeypatch):
    folder, _ = first
    calls = []
    monkeypatch.setattr(rerun.subprocess, "run", lambda call, env, check: calls.append(call) or
                        type("Done", (), {"returncode": 0})())
    assert rerun.main(["--grid", str(folder), "--out", str(tmp_path / "again"), "--dry-run"]) == 0
    assert calls[0][-1] == "-n" and not (tmp_path / "again").exists()  # no rerun.json (issue 64)


def test_a_grid_that_has_not_aggregated_or_has_a_tuning_section_is_refused(first, tmp_path, capsys):
    folder, config = first
    (folder / "summary.json").unlink()
    assert rerun.main(["--grid", str(folder), "--out", str(tmp_path / "again")]) == 2
    assert "summary.json" in capsys.readouterr().err
    tuned = {**config, "tuning": {"seeds": [100], "metric": "auc", "lags": None,
                                  "recipes": {r: {"param": "aggregation", "values": ["token_mean"]} for r in config["recipes"]}}}
    with pytest.raises(ValueError, match="tuning"):
        rerun.declare(Config.build(validate(tuned)), folder, tmp_path / "again", "default")


def test_only_claims_both_grids_tested_are_compared_and_the_prediction_is_the_sum_of_printed_probabilities():
    def claim(name, verdict, replication):
        declared = StalenessCost(name=name, recipe="a", lag=8, expect="less", smallest_effect=0.1, metric="auc",
                                 reference_lag=1)
        return Verdict(claim=declared, statement="", family_size=3, verdict=verdict, why="", final=True, look=1,
                       replication=replication)
    first = Summary(seeds=[0, 1], claims=[claim("a", "exceeds", 0.9), claim("b", "negligible", 0.6),
                                          claim("c", "not tested in this grid", None)])
    second = Summary(seeds=[2, 3], claims=[claim("a", "exceeds", 0.8), claim("b", "opposite", 0.5),
                                           claim("c", "not tested in this grid", None)])
    result = rerun.compare(first, second)
    assert [(r["name"], r["same"]) for r in result["claims"]] == [("a", True), ("b", False)]
    assert (result["same"], result["compared"], result["expected_same"]) == (1, 2, pytest.approx(1.5))
