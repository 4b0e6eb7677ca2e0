"""tracking.sync: the MLflow layout, idempotent re-sync, and the grid seen through a real mlflow server."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from harness.grid import expand, run_dir
from harness.io import append_jsonl_atomic, read_jsonl, write_json_atomic
from analysis.report import REPORT_FILES, collect, summarize, write_reports
from tracking.sync import KIND, main, sync, tracking_uri
from grid_fixture import DIVERGE_STEP, DIVERGED, EARLY_DIVERGED, make_grid

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
EXTRA_STEP_RUN = ("sat_grpo", 8, 2)  # gets one more training step between the two syncs


def track(config):
    assert main(["--config-json", json.dumps(config), "--grid-dir", str(run_dir(config, "x", 1, 0).parents[3])]) == 0
    return json.loads((run_dir(config, "x", 1, 0).parents[3] / "mlflow.json").read_text())


def all_runs(client, experiment_id):
    return client.search_runs([experiment_id], max_results=1000)


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """One store for the module: sync, count, change the grid, sync again."""
    from mlflow.tracking import MlflowClient
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        config = make_grid(tmp_path_factory.mktemp("track"))
        write_reports(config, run_dir(config, "x", 1, 0).parents[3], progress=False)
        first = track(config)
        client = MlflowClient(tracking_uri(config)[0])
        first_count = len(all_runs(client, first["experiment_id"]))
        # changes a re-sync must carry: one more training step, and a re-aggregation with another
        # fixed step (summary numbers change)
        append_jsonl_atomic(run_dir(config, *EXTRA_STEP_RUN) / "train" / "metrics.jsonl",
                            [{"step": 21, "reward": 0.99, "d/mean_abs": 0.5}])
        config = {**config, "eval": {**config["eval"], "fixed_step": 10}}
        write_json_atomic(run_dir(config, "x", 1, 0).parents[3] / "summary.json",
                          summarize(config, collect(config, progress=False)))
        second = track(config)
        yield config, client, first, first_count, second
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def test_expected_runs_with_parent_tags(synced):
    config, client, first, first_count, _ = synced
    runs = all_runs(client, first["experiment_id"])
    kinds = {}
    for run in runs:
        kinds.setdefault(run.data.tags[KIND], []).append(run)
    n_runs, n_cells = len(expand(config)), len(config["recipes"]) * len(config["lags"])
    assert first_count == 1 + n_runs + n_cells
    assert {k: len(v) for k, v in kinds.items()} == {"parent": 1, "run": n_runs, "cell": n_cells}
    parent = kinds["parent"][0]
    assert parent.info.run_id == first["parent_run_id"] and first["created"] == first_count
    for run in kinds["run"] + kinds["cell"]:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED"
    keys = {json.loads((run_dir(config, *r) / "config.json").read_text())["run_key"]: r for r in expand(config)}
    for run in kinds["run"]:
        recipe, lag, seed = keys[run.data.tags["run_key"]]
        assert (run.data.tags["recipe"], run.data.tags["lag"], run.data.tags["seed"]) == (recipe, str(lag), str(seed))
        assert run.data.tags["engine"] == "tiny" and len(run.data.tags["mlflow.source.git.commit"]) >= 7
        assert run.data.params["recipe.loss"] == recipe.removesuffix("_r3")
        assert run.data.params["lag"] == str(lag)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert set(REPORT_FILES) <= artifacts


def test_second_track_adds_none_and_updates(synced):
    config, client, first, first_count, second = synced
    runs = all_runs(client, first["experiment_id"])
    assert len(runs) == first_count and len({r.data.tags["run_key"] for r in runs}) == first_count
    assert (second["created"], second["updated"]) == (0, first_count)
    assert second["parent_run_id"] == first["parent_run_id"]
    by_key = {r.data.tags["run_key"]: r for r in runs}
    # the extra training step arrived once; no step was logged twice
    key = json.loads((run_dir(config, *EXTRA_STEP_RUN) / "config.json").read_text())["run_key"]
    history = client.get_metric_history(by_key[key].info.run_id, "train/reward")
    assert [m.step for m in history] == list(range(1, 22)) and history[-1].value == 0.99
    # eval curves match the files exactly
    for recipe, lag, seed in [EXTRA_STEP_RUN, DIVERGED]:
        run_config = json.loads((run_dir(config, recipe, lag, seed) / "config.json").read_text())
        history = client.get_metric_history(by_key[run_config["run_key"]].info.run_id, "eval/tiny_test/score")
        rows = read_jsonl(run_dir(config, recipe, lag, seed) / "eval" / "tiny_test.jsonl")
        assert [(m.step, m.value) for m in history] == [(r["step"], r["score"]) for r in rows]
    # another fixed step: summary numbers were updated in place (the latest value is the new one)
    summary = json.loads((run_dir(config, "x", 1, 0).parents[3] / "summary.json").read_text())
    for cell in summary["cells"]:
        run = by_key[f"cell:{config['grid']}:{cell['recipe']}:lag{cell['lag']}"]
        assert run.data.metrics["collapse/k"] == cell["collapse"]["k"]
        assert run.data.metrics["fixed/mean"] == pytest.approx(cell["stats"]["fixed"]["estimate"])
        if cell["staleness_cost"] is not None:  # the comparisons of issue 11 reach MLflow too
            assert run.data.metrics["staleness/fixed/p_holm"] == pytest.approx(cell["staleness_cost"]["fixed"]["p_holm"])
    fixed = client.get_metric_history(by_key[key].info.run_id, "run/fixed")
    assert len(fixed) == 2 and fixed[0].value != fixed[1].value
    assert by_key[key].data.metrics["run/fixed"] == read_jsonl(
        run_dir(config, *EXTRA_STEP_RUN) / "eval" / "tiny_test.jsonl")[1]["score"]  # step 10


def test_training_curves_strided_and_run_dir_tagged(synced):
    config, client, _, _, _ = synced
    other = make_grid(config["results_dir"], grid="strided")  # same store, its own experiment
    grid = run_dir(other, "x", 1, 0).parents[3]
    write_json_atomic(grid / "summary.json", summarize(other, collect(other, progress=False)))
    marker = sync(other, grid, progress=False, max_train_points=5)  # 20 steps -> every 4th
    runs = {r.data.tags["run_key"]: r for r in all_runs(client, marker["experiment_id"])}
    expected = {("grpo", 1, 0): [1, 4, 8, 12, 16, 20], DIVERGED: [1, 4, 8, DIVERGE_STEP], EARLY_DIVERGED: [1, 3]}
    for run, steps in expected.items():
        run_id = runs[json.loads((run_dir(other, *run) / "config.json").read_text())["run_key"]].info.run_id
        assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == steps
        assert client.get_run(run_id).data.tags["run_dir"] == str(run_dir(other, *run).resolve())
        # the selection task's curve is logged too
        assert len(client.get_metric_history(run_id, "eval/tiny_val/score")) == len(
            read_jsonl(run_dir(other, *run) / "eval" / "tiny_val.jsonl"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rest(base, path, body=None):
    if body is None:
        request = urllib.request.Request(base + path)
    else:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
    return json.loads(data) if response.headers.get_content_type() == "application/json" else data


def test_grid_through_mlflow_server_rest_api(synced, tmp_path):
    config, _, first, first_count, _ = synced
    results = os.path.abspath(config["results_dir"])
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{results}/mlflow.db",
         "--default-artifact-root", f"file://{results}/mlartifacts", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.5)
        experiment = rest(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=" + config["grid"])
        experiment_id = experiment["experiment"]["experiment_id"]
        assert experiment_id == first["experiment_id"]
        runs = rest(base, "/api/2.0/mlflow/runs/search",
                    {"experiment_ids": [experiment_id], "max_results": 1000})["runs"]
        assert len(runs) == first_count
        child = rest(base, "/api/2.0/mlflow/runs/search",
                     {"experiment_ids": [experiment_id], "max_results": 1000,
                      "filter": f"tags.\"{KIND}\" = 'run' and tags.recipe = 'grpo' and tags.lag = '8'"})["runs"]
        assert len(child) == len(config["seeds"])
        for run in child:
            tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
            assert tags["mlflow.parentRunId"] == first["parent_run_id"]
            rows = read_jsonl(run_dir(config, "grpo", 8, int(tags["seed"])) / "eval" / "tiny_test.jsonl")
            query = urllib.parse.urlencode({"run_id": run["info"]["run_id"], "metric_key": "eval/tiny_test/score"})
            history = rest(base, "/api/2.0/mlflow/metrics/get-history?" + query)["metrics"]
            assert sorted((m["step"], m["value"]) for m in history) == [(r["step"], r["score"]) for r in rows]
        listed = rest(base, "/api/2.0/mlflow/artifacts/list?run_id=" + first["parent_run_id"])
        assert set(REPORT_FILES) <= {f["path"] for f in listed["files"]}
        table = rest(base, "/get-artifact?" + urllib.parse.urlencode({"path": "table.md", "run_uuid": first["parent_run_id"]}))
        assert table == (run_dir(config, "x", 1, 0).parents[3] / "table.md").read_bytes()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_store_location(monkeypatch, tmp_path):
    config = {"grid": "g", "results_dir": str(tmp_path / "res")}
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri, artifacts = tracking_uri(config)
    assert uri == f"sqlite:///{tmp_path}/res/mlflow.db" and artifacts == f"file://{tmp_path}/res/mlartifacts/g"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking_uri(config) == ("http://127.0.0.1:5999", None)


def test_bad_grid_dir_or_unaggregated_grid_is_named(tmp_path, capsys):
    config = make_grid(tmp_path)
    args = ["--config-json", json.dumps(config), "--grid-dir"]
    assert main(args + [str(tmp_path / "elsewhere")]) == 2
    assert "is not the config's <results_dir>/<grid>" in capsys.readouterr().err
    assert main(args + [str(tmp_path / config["grid"])]) == 2
    assert "summary.json missing: run analysis.aggregate first" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()  # refused before any store was opened
