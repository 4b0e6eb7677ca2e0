"""Live tracking of a grid still running: RUNNING runs with their curves so far, one writer by
lock, and the final sync finishing the same runs (through a real mlflow server)."""
import json
import os
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from analysis.report.write import write_reports
from analysis.schedule.tune import selection
from grid.config import validate
from grid.expand import expand, grid_dir
from grid.folder import GridDir
from grid.settings import Config
from grid.tuning import Tuning
from harness.io import read_jsonl, write_json_atomic, write_text_atomic
from tests.support.grid_fixture import DIVERGED, make_grid, written_grid
from tests.support.mlflow_server import mlflow_server, rest, run_tags
from tests.support.paths import ROOT
from tests.support.tuning_grid import TUNING_SCORE, raw_config, write_run
from tests.support.waiting import GENEROUS_S, wait_until
from tracking.runs import SUMMARY_SUFFIX, TUNING_SUFFIX
from tracking.store import KIND
from tracking.sync import main, sync

pytestmark = pytest.mark.slow  # an MLflow server and a grid trained while it syncs

TRAINING = ("sat_grpo", 8, 1)  # half-way: 10 of 20 steps, evaluated at step 5 and 10, no status
NOT_STARTED = ("grpo_r3", 1, 2)  # no run directory yet


def unfinish(config, tmp_path):
    """Turn the finished fixture grid into a running one; returns how to finish it again."""
    training, missing = GridDir.of(config).run(*TRAINING).path, GridDir.of(config).run(*NOT_STARTED).path
    saved = tmp_path / "saved"
    shutil.copytree(training, saved / "training")
    shutil.move(missing, saved / "missing")
    (training / "train" / "status.json").unlink()
    for path in [training / "train" / "metrics.jsonl", *(training / "eval").glob("*.jsonl")]:
        rows = [row for row in read_jsonl(path) if row["step"] <= 10]
        write_text_atomic(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))

    def finish():
        shutil.rmtree(training)
        shutil.copytree(saved / "training", training)
        shutil.move(saved / "missing", missing)
    return finish


def search(base, experiment_id):
    return rest(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id], "max_results": 1000})["runs"]


def steps_of(base, run_id, key):
    query = f"/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key={key}"
    return sorted(m["step"] for m in rest(base, query).get("metrics", []))


def test_follow_a_running_grid_then_finish_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = make_grid(tmp_path / "results")
    finish = unfinish(config, tmp_path)
    folder = written_grid(config)
    log = tmp_path / "follow.log"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    with open(log, "w") as out:
        follower = subprocess.Popen([sys.executable, "-m", "tracking.sync", "--grid", folder,
                                     "--follow", "1"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            wait_until(lambda: "live pass 1:" in log.read_text(), "the first live pass", follower, poll_s=0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{log.read_text()[-3000:]}") from None
        # a second writer is refused while the follower holds the lock, naming it
        assert main(["--grid", folder, "--live"]) == 3
        error = capsys.readouterr().err
        assert "tracking.lock is held by another writer" in error and "(MLflow writer, follow, since" in error
        assert not (grid_dir(config) / "mlflow.json").exists()  # a live sync writes no marker

        with mlflow_server(tmp_path / "results", tmp_path / "server.log") as base:
            experiment_id = rest(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name="
                                 + config["grid"])["experiment"]["experiment_id"]
            live = {run_tags(r)["run_key"]: r for r in search(base, experiment_id)}
            keys = {run: json.loads((GridDir.of(config).run(*run).path / "config.json").read_text())["run_key"]
                    for run in expand(config) if run != NOT_STARTED}
            assert len(live) == len(keys) + 1  # the started runs and the parent, RUNNING
            parent = next(r for r in live.values() if run_tags(r)[KIND] == "parent")
            assert parent["info"]["status"] == "RUNNING"
            running = live[keys[TRAINING]]
            assert running["info"]["status"] == "RUNNING"
            assert steps_of(base, running["info"]["run_id"], "train/reward") == list(range(1, 11))
            assert steps_of(base, running["info"]["run_id"], "eval/tiny_test/score") == [5, 10]
            assert live[keys[DIVERGED]]["info"]["status"] == "FAILED"
            assert {r["info"]["status"] for k, r in live.items() if k not in (keys[TRAINING], keys[DIVERGED])
                    and r is not parent} <= {"FINISHED", "FAILED"}

            # the grid completes and is aggregated: the follower stops by itself
            finish()
            write_reports(Config.build(config), progress=False)
            follower.wait(timeout=GENEROUS_S)  # it stops by itself once the grid is aggregated
            assert follower.returncode == 0, log.read_text()
            # the final sync (the track rule) finishes the same runs: nothing duplicated
            assert main(["--grid", folder, "--wait-lock", "60"]) == 0
            assert "make ui" in capsys.readouterr().err  # its last line: how to open the UI

            final = {run_tags(r)["run_key"]: r for r in search(base, experiment_id)}
            keys[NOT_STARTED] = json.loads((GridDir.of(config).run(*NOT_STARTED).path / "config.json").read_text())["run_key"]
            assert len(final) == len(expand(config)) + 1 and set(live) < set(final)
            assert all(final[k]["info"]["run_id"] == r["info"]["run_id"] for k, r in live.items())
            assert final[keys[TRAINING]]["info"]["status"] == "FINISHED"
            assert final[keys[DIVERGED]]["info"]["status"] == "FAILED"
            assert steps_of(base, final[keys[TRAINING]]["info"]["run_id"], "train/reward") == list(range(1, 21))
            assert steps_of(base, final[keys[TRAINING]]["info"]["run_id"], "eval/tiny_test/score") == [5, 10, 15, 20]
            assert next(r for r in final.values() if run_tags(r)[KIND] == "parent")["info"]["status"] == "FINISHED"
            summary = rest(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name="
                           + urllib.parse.quote(config["grid"] + SUMMARY_SUFFIX))["experiment"]["experiment_id"]
            cells = [run_tags(r)[KIND] for r in search(base, summary)]  # a summary run a cell, no band run
            assert cells == ["cell"] * len(config["recipes"]) * len(config["lags"])
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_follow_interval_must_be_positive(tmp_path, capsys):
    config = make_grid(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--grid", written_grid(config), "--follow", "0"])
    assert exit_.value.code == 2
    assert "--follow INTERVAL must be > 0 seconds" in capsys.readouterr().err


def test_a_live_tuning_grid_syncs_its_candidates_apart_then_the_pick_and_its_confirmation_runs(tmp_path, monkeypatch):
    """Before the pick: the candidates' runs that started, in the tuning experiment without a picked
    tag, and no run in the grid's (its runs are the confirmation runs, not named yet); after it: the
    picked tags, the pick on the parent, and the confirmation runs that started, in the grid's."""
    from mlflow.tracking import MlflowClient
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = validate(raw_config(tmp_path / "results", lag_mode="constant"))
    model, grid, tuning = Config.build(config), GridDir.of(config), Tuning.of(config)
    for run in tuning.runs()[:-1]:  # the last candidate run has not started
        write_run(config, model, run, TUNING_SCORE[run[0]])
    marker = sync(model, progress=False, final=False)
    client = MlflowClient(marker["tracking_uri"])
    assert client.get_experiment(marker["tuning_experiment_id"]).name == config["grid"] + TUNING_SUFFIX
    candidates = client.search_runs([marker["tuning_experiment_id"]], max_results=100)
    assert len(candidates) == marker["tuning_runs"] == len(tuning.runs()) - 1
    assert all(r.data.tags["tuning"] == "candidate" and "picked" not in r.data.tags for r in candidates)
    assert [r.data.tags[KIND] for r in client.search_runs([marker["experiment_id"]])] == ["parent"]
    write_run(config, model, tuning.runs()[-1], TUNING_SCORE[tuning.runs()[-1][0]])
    write_json_atomic(grid.tuning_path, selection(model))
    confirmation = tuple(grid.read_tuning()["confirmation_runs"][0])
    write_run(config, model, confirmation, 0.3)
    marker = sync(model, progress=False, final=False)
    candidates = client.search_runs([marker["tuning_experiment_id"]], max_results=100)
    assert (len(candidates), marker["created"]) == (len(tuning.runs()), 2)  # the last candidate, the confirmation run
    assert sorted(r.data.params["recipe"] for r in candidates if r.data.tags["picked"] == "true") == sorted(
        ["grpo.eps_low_eps_high-0.1", "sat_grpo.alpha-0.9"] * 4)
    runs = {r.data.tags[KIND]: r for r in client.search_runs([marker["experiment_id"]])}
    assert runs.keys() == {"parent", "run"} and runs["run"].info.run_name == "{}/lag{}/seed{}".format(*confirmation)
    assert runs["parent"].data.tags["tuning.picked.grpo"] == "0.1"
