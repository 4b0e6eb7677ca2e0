"""tracking.sync of a grid with an equal tuning budget: its candidates' runs on the tuning seeds in their own
experiment, tagged picked or not, the grid's experiment holding the confirmation runs and the pick, a second sync
duplicating nothing, and `make ui` linking the candidates apart from the seed runs."""
import os

import pytest

from analysis.report.write import write_reports
from analysis.schedule.tune import selection
from grid.config import validate
from grid.folder import GridDir
from grid.settings import Config
from grid.tuning import Tuning
from harness.io import write_json_atomic
from tests.support.tracked_grid import all_runs, key_of, track
from tests.support.tuning_grid import TUNING_SCORE, raw_config, write_run
from tracking.runs import TUNING_ARTIFACT, TUNING_SUFFIX
from tracking.store import KIND, local_artifact_dir

pytestmark = pytest.mark.slow  # an MLflow store synced per module

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A grid with an equal tuning budget in a store of its own: its candidates' runs on the tuning
    seeds, the pick (tuning.json, as the tune checkpoint writes it), the picked values' confirmation
    runs, aggregated; synced twice."""
    from mlflow.tracking import MlflowClient
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        config = validate(raw_config(tmp_path_factory.mktemp("tuned") / "results", lag_mode="constant", claims=[]))
        model, grid = Config.build(config), GridDir.of(config)
        for run in Tuning.of(config).runs():
            write_run(config, model, run, TUNING_SCORE[run[0]])
        write_json_atomic(grid.tuning_path, selection(model))
        for variant, lag, seed in grid.read_tuning()["confirmation_runs"]:
            write_run(config, model, (variant, lag, seed), 0.2 + 0.01 * seed)
        write_reports(model, progress=False)
        first = track(config)
        client = MlflowClient(first["tracking_uri"])
        counts = {e: len(all_runs(client, first[e])) for e in ("experiment_id", "tuning_experiment_id")}
        yield config, client, first, counts, track(config)
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def test_tuning_candidates_in_their_own_experiment_tagged_picked_or_not(tuned):
    config, client, first, _, _ = tuned
    tuning, pick = Tuning.of(config), GridDir.of(config).read_tuning()
    experiment = client.get_experiment_by_name(config["grid"] + TUNING_SUFFIX)
    assert experiment.experiment_id == first["tuning_experiment_id"] not in (
        first["experiment_id"], first["summary_experiment_id"])
    candidates = all_runs(client, experiment.experiment_id)
    # one run per candidate x lag x tuning seed: 2 recipes x 2 values x 2 lags x 2 seeds
    assert len(candidates) == first["tuning_runs"] == len(tuning.runs()) == 16
    keys = {key_of(config, run): run for run in tuning.runs()}
    assert sorted(r.data.tags["run_key"] for r in candidates) == sorted(keys)
    picked = {"grpo.eps_low_eps_high-0.1", "sat_grpo.alpha-0.9"}  # TUNING_SCORE: 0.1 wins, 0.9 keeps a tie
    assert {e["variant"] for e in pick["recipes"].values()} == picked
    for run in candidates:
        variant, lag, seed = keys[run.data.tags["run_key"]]
        params, tags = run.data.params, run.data.tags
        assert (params["recipe"], params["lag"], params["seed"]) == (variant, str(lag), str(seed))
        recipe, value = variant.split(".", 1)[0], variant.rpartition("-")[2]
        assert (params["tuning.recipe"], params["tuning.value"]) == (recipe, value)
        assert params["tuning.param"] == ('["eps_low", "eps_high"]' if recipe == "grpo" else '["alpha"]')
        assert (tags[KIND], tags["tuning"], tags["picked"]) == ("candidate", "candidate", str(variant in picked).lower())
        assert tags["stalebench.grid_run"] == first["parent_run_id"] and "mlflow.parentRunId" not in tags
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "eval/tiny_test/score")  # its curve, in percent
        assert [(m.step, m.value) for m in history] == [(s, pytest.approx(100 * TUNING_SCORE[variant]))
                                                        for s in (5, 10, 15, 20)]


def test_the_grid_experiment_holds_the_confirmation_runs_and_the_pick_no_candidate(tuned):
    config, client, first, _, _ = tuned
    pick = GridDir.of(config).read_tuning()
    runs = all_runs(client, first["experiment_id"])
    seeds = [r for r in runs if r.data.tags[KIND] == "run"]
    assert len(runs) == 1 + len(seeds) and first["runs"] == len(seeds) == 2 * 2 * 3
    assert sorted(r.data.tags["run_key"] for r in seeds) == sorted(
        key_of(config, tuple(run)) for run in pick["confirmation_runs"])
    assert not any("tuning" in r.data.tags or "tuning.value" in r.data.params for r in runs)
    assert {r.data.params["seed"] for r in seeds} == {"0", "1", "2"}  # no tuning seed among the results
    parent = next(r for r in runs if r.data.tags[KIND] == "parent")
    assert (parent.data.tags["tuning.picked.grpo"], parent.data.tags["tuning.picked.sat_grpo"]) == ("0.1", "0.9")
    table = (local_artifact_dir(config["results_dir"], parent.info.artifact_uri) / TUNING_ARTIFACT).read_text()
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith(("| grpo", "| sat_grpo"))]
    assert [row[2:] for row in rows] == [["0.2, 0.1", "0.1", "grpo.eps_low_eps_high-0.1 |"],
                                         ["0.9, 0.5", "0.9", "sat_grpo.alpha-0.9 |"]]
    assert not any(f"{100 * score:.1f}" in table for score in TUNING_SCORE.values())  # no tuning score
    assert "not results" in table and f"'{config['grid']}{TUNING_SUFFIX}'" in table


def test_a_second_tuning_sync_duplicates_nothing(tuned):
    _, client, first, counts, second = tuned
    assert second["created"] == 0 and second["parent_run_id"] == first["parent_run_id"]
    for experiment, count in counts.items():
        runs = all_runs(client, first[experiment])
        assert len(runs) == count == len({r.data.tags["run_key"] for r in runs})
        assert all(len(client.get_metric_history(r.info.run_id, "eval/tiny_test/score")) == 4
                   for r in runs if r.data.tags[KIND] != "parent")


def test_make_ui_links_the_tuning_candidates_apart_from_the_seed_runs(tuned):
    from tracking.ui import links
    config, _, first, _, _ = tuned
    printed = links("http://127.0.0.1:5000", first["tracking_uri"], config["grid"]).splitlines()
    at = printed.index("Tuning candidates (the tuning seeds: how each value was picked, never a result):")
    assert printed[at + 1] == f"http://127.0.0.1:5000/#/experiments/{first['tuning_experiment_id']}"
    assert printed[0].startswith("Claims, the report (outcome, estimate and interval")  # what the grid was run to answer, first
    seeds = printed.index(f"Seed runs at lag {min(config['lags'])} (a line per recipe, the mean of its seeds over "
                          "their min-max band):")
    assert f"experiments/{first['experiment_id']}" in printed[seeds + 1] and seeds < at
