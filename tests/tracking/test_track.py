"""tracking.sync: the MLflow layout, idempotent re-sync, units, status, and the grid seen through a real mlflow
server (filters, timestamps, a moved store). The tuning candidates of an equal tuning budget: test_track_tuning."""
import json
import os
import shutil

import pytest

from analysis.cells.summary import collect
from analysis.claims.summary_file import read_summary, write_summary
from analysis.claims.verdicts import replication_text
from analysis.report.tables import claim_text, size_text
from analysis.report.write import summarize, write_reports
from analysis.statistics.cell_stats import CellStats
from grid.config import validate
from grid.expand import expand, grid_dir
from grid.folder import GridDir, report_files
from grid.settings import Config
from harness.io import append_jsonl_atomic, read_jsonl, write_json_atomic
from tests.support.grid_fixture import (
    CLAIMS,
    COLLAPSED,
    DIVERGE_STEP,
    DIVERGED,
    EARLY_DIVERGED,
    START_TIME,
    make_grid,
    write_samples,
    written_grid,
)
from tests.support.mlflow_server import mlflow_server, rest, run_params, run_tags
from tests.support.tracked_grid import all_runs, key_of, track
from tracking import layout
from tracking.runs import COMPARISON_SUFFIX, SUMMARY_SUFFIX
from tracking.store import KIND, VERDICTS_ARTIFACT, local_artifact_dir, tracking_uri
from tracking.sync import main, sync

pytestmark = pytest.mark.slow  # an MLflow store synced per module, MLflow servers

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
EXTRA_STEP_RUN = ("sat_grpo", 8, 2)  # gets one more training step between the two syncs



@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """One store for the module: sync, count, change the grid, sync again."""
    from mlflow.tracking import MlflowClient
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        config = validate({**make_grid(tmp_path_factory.mktemp("track") / "results"), "claims": CLAIMS})
        write_samples(config)  # the collapsed run's (COLLAPSED) sampled completions
        write_reports(Config.build(config), progress=False)
        first = track(config)
        client = MlflowClient(tracking_uri(config["results_dir"])[0])
        first_count = len(all_runs(client, first["experiment_id"]))
        # changes a re-sync must carry: one more training step, and a re-aggregation with another
        # fixed step (summary numbers change)
        append_jsonl_atomic(GridDir.of(config).run(*EXTRA_STEP_RUN).path / "train" / "metrics.jsonl",
                            [{"step": 21, "time": START_TIME + 42, "reward": 0.99, "d/mean_abs": 0.5}])
        config = {**config, "eval": {**config["eval"], "fixed_step": 10}}
        typed = Config.build(config)
        write_summary(grid_dir(config) / "summary.json", summarize(typed, collect(typed, progress=False)))
        second = track(config)
        yield config, client, first, first_count, second
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def test_seed_runs_in_the_grid_experiment_summaries_in_their_own(synced):
    config, client, first, first_count, _ = synced
    runs = all_runs(client, first["experiment_id"])
    kinds = {}
    for run in runs:
        kinds.setdefault(run.data.tags[KIND], []).append(run)
    n_runs, n_cells = len(expand(config)), len(config["recipes"]) * len(config["lags"])
    assert first_count == 1 + n_runs and {k: len(v) for k, v in kinds.items()} == {"parent": 1, "run": n_runs}
    summary = client.get_experiment_by_name(config["grid"] + SUMMARY_SUFFIX)
    assert summary.experiment_id == first["summary_experiment_id"] != first["experiment_id"]
    every = all_runs(client, summary.experiment_id)  # a summary run per cell, no band run among them
    assert sorted(r.data.tags[KIND] for r in every) == ["cell"] * n_cells
    # what the comparisons draw: per cell mean, low, high; the intervals' charts (one figure run)
    drawn = all_runs(client, first["comparison_experiment_id"])
    assert client.get_experiment(first["comparison_experiment_id"]).name == config["grid"] + COMPARISON_SUFFIX
    assert sorted(r.data.tags[KIND] for r in drawn) == ["drawn"] * 3 * n_cells + ["figure"]
    drawn = [r for r in drawn if r.data.tags[KIND] == "drawn"]  # the figure run: images only (test_track_ui)
    parent = kinds["parent"][0]
    assert parent.info.run_id == first["parent_run_id"] and first["created"] == first_count + 4 * n_cells + 1
    assert all(r.data.tags["stalebench.grid_run"] == parent.info.run_id for r in every + drawn)
    assert sorted((r.data.params["recipe"], r.data.params["lag"]) for r in every + drawn) == sorted(
        [(recipe, str(lag)) for recipe in config["recipes"] for lag in config["lags"]] * 4)
    # the comparison's bands: each cell's curve, its mean on the summary run and the mean run, each bound on a band run
    summary_json = json.loads((grid_dir(config) / "summary.json").read_text())
    by_name = {r.info.run_name: r for r in every + drawn}
    for cell in summary_json["cells"]:
        name = f"{cell['recipe']}/lag{cell['lag']}"
        for run_name, part in ((f"summary {name}", "estimate"), (f"{name} mean", "estimate"), (f"{name} low", "low"),
                               (f"{name} high", "high")):
            run = by_name[run_name]
            history = client.get_metric_history(run.info.run_id, "eval/tiny_test/score")
            assert [(m.step, m.value) for m in history] == [(p["step"], pytest.approx(100 * p[part]))
                                                            for p in cell["curve"] if p[part] is not None]
        assert set(by_name[f"{name} mean"].data.metrics) == {"eval/tiny_test/score"}  # no cost bars: the intervals'
    keys = {key_of(config, r): r for r in expand(config)}
    for run in kinds["run"]:
        recipe, lag, seed = keys[run.data.tags["run_key"]]
        params = run.data.params
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id and "run_key" not in params
        assert (params["recipe"], params["lag"], params["seed"]) == (recipe, str(lag), str(seed))
        assert (params["loss"], params["lag_mode"], params["engine"], params["preset"]) == (
            recipe.removesuffix("_r3"), "interval", "tiny", "demo")
        # resolved hyper-parameters (the demo preset's), stabilizer defaults, evaluation settings
        assert (params["lr"], params["width"], params["loss.eps_low"]) == ("0.0003", "64", "0.2")
        assert params["routing_replay"] == str(recipe.endswith("_r3"))
        assert (params["eval.k"], params["eval.temperature"]) == ("8", "1.0")
        evaluated = read_jsonl(GridDir.of(config).run(recipe, lag, seed).path / "eval" / "tiny_test.jsonl")
        assert params.get("eval.tiny_test.problems") == (str(evaluated[-1]["n_problems"]) if evaluated else None)
        assert run.data.tags["run_dir"] == f"{config['grid']}/runs/{recipe}/lag{lag}/seed{seed}"  # store-relative
        assert len(run.data.tags["mlflow.source.git.commit"]) >= 7
    sat = next(r for r in kinds["run"] if r.data.params["recipe"] == "sat_grpo")
    assert sat.data.params["loss.alpha"] == "0.9" and sat.data.params["loss.quantile_scope"] == "microbatch"
    # artifacts: in the folder the UI server serves mlflow-artifacts:/ from (a REST test opens them)
    assert parent.info.artifact_uri == f"mlflow-artifacts:/{config['grid']}/{parent.info.run_id}/artifacts"
    folder = local_artifact_dir(config["results_dir"], parent.info.artifact_uri)
    assert {p.name for p in folder.iterdir()} == set(report_files(config["lag_mode"])) | {"workflow_config.json", VERDICTS_ARTIFACT}
    # the report page: a short row per claim (outcome, estimate with its interval, P(same outcome on a rerun)), then
    # the views one click away and the collapsed runs' samples beside their cell
    report = (folder / VERDICTS_ARTIFACT).read_text().splitlines()
    rows = [line.split(" | ") for line in report[4:4 + len(summary_json["claims"])]]
    assert [(row[0].removeprefix("| "), row[1], row[2], row[3].removesuffix(" |")) for row in rows] == [
        (c.claim.name, f"**{c.verdict}**", claim_text(c), replication_text(c, with_range=True))
        for c in read_summary(grid_dir(config) / "summary.json").claims]
    links = "\n".join(report[4 + len(summary_json["claims"]):])
    for view in ("stalebench-intervals", *(f"stalebench-{kind}-lag{lag}" for kind in ("dynamics", "cells", "seeds")
                                           for lag in config["lags"])):
        assert f"viewStateShareKey={view})" in links, view
    # each interval chart one click from the report at its full size (its PNG's artifact page, a link relative to the
    # page: it keeps a path prefix), and the card's webp is that image, not MLflow's 256 px thumbnail (issue 65)
    import PIL.Image
    (figure,) = [r for r in all_runs(client, first["comparison_experiment_id"]) if r.data.tags[KIND] == "figure"]
    pngs = sorted((local_artifact_dir(config["results_dir"], figure.info.artifact_uri) / "images").glob("*.png"))
    assert len(pngs) == links.count("/artifacts/images/") > 1
    for png in pngs:
        assert f"(#/experiments/{first['comparison_experiment_id']}/runs/{figure.info.run_id}/artifacts/images/" \
               f"{png.name})" in links
        with PIL.Image.open(png) as full, PIL.Image.open(png.with_name(f"{png.stem}+compressed.webp")) as card:
            assert card.size == full.size and full.width > 400


def test_a_collapsed_runs_samples_are_its_table_and_the_report_links_them(synced):
    config, client, first, _, second = synced
    (run,) = client.search_runs([first["experiment_id"]], "params.recipe = 'grpo' AND "
                                f"params.lag = '{COLLAPSED[1]}' AND params.seed = '{COLLAPSED[2]}'")
    assert run.data.tags["collapsed"] == "true"
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [{"path": "samples.json", "type": "table"}]
    table = json.loads((local_artifact_dir(config["results_dir"], run.info.artifact_uri) / "samples.json").read_text())
    rows = GridDir.of(config).run(*COLLAPSED).read_samples()
    assert table["columns"][:3] == ["step", "prompt", "completion"] and set(table["columns"]) == set(rows[0])
    assert table["data"] == [[row[c] for c in table["columns"]] for row in rows]  # every row once, not twice
    parent = client.get_run(second["parent_run_id"])
    report = (local_artifact_dir(config["results_dir"], parent.info.artifact_uri) / VERDICTS_ARTIFACT).read_text()
    link = f"#/experiments/{first['experiment_id']}/runs/{run.info.run_id}/artifacts/samples.json"
    assert f"grpo/lag{COLLAPSED[1]} [seed {COLLAPSED[2]}]({link})" in report
    description = client.get_experiment(first["experiment_id"]).tags["mlflow.note.content"]
    assert description.startswith(f"**[The report: claims, intervals, dynamics, samples](#/experiments/"
                                  f"{first['experiment_id']}/runs/{second['parent_run_id']}/artifacts/verdicts.md)**")


def test_second_track_adds_none_and_updates(synced):
    config, client, first, first_count, second = synced
    runs = all_runs(client, first["experiment_id"])
    cells = {r.data.tags["run_key"]: r for r in all_runs(client, first["summary_experiment_id"])}
    assert len(runs) == first_count and len({r.data.tags["run_key"] for r in runs}) == first_count
    drawn = all_runs(client, first["comparison_experiment_id"])
    assert (second["created"], second["updated"]) == (0, first_count + len(cells) + len(drawn))
    assert second["parent_run_id"] == first["parent_run_id"]
    by_key = {r.data.tags["run_key"]: r for r in runs}
    # the extra training step arrived once; no step was logged twice
    key = key_of(config, EXTRA_STEP_RUN)
    history = client.get_metric_history(by_key[key].info.run_id, "train/reward")
    assert [m.step for m in history] == list(range(1, 22)) and history[-1].value == 0.99
    # eval curves match the files, in percent
    for run in [EXTRA_STEP_RUN, DIVERGED]:
        history = client.get_metric_history(by_key[key_of(config, run)].info.run_id, "eval/tiny_test/score")
        rows = read_jsonl(GridDir.of(config).run(*run).path / "eval" / "tiny_test.jsonl")
        assert [(m.step, m.value) for m in history] == [(r["step"], pytest.approx(100 * r["score"])) for r in rows]
    # another fixed step: summary numbers were updated in place, one name and unit with the seed runs'
    summary = json.loads((grid_dir(config) / "summary.json").read_text())
    for cell in summary["cells"]:
        run = cells[f"cell:{config['grid']}:{cell['recipe']}:lag{cell['lag']}"]
        assert run.data.metrics["collapsed/k"] == cell["collapse"]["k"]
        assert run.data.metrics["collapsed"] == pytest.approx(cell["collapse"]["estimate"])
        assert run.data.metrics["fixed"] == pytest.approx(100 * cell["stats"]["fixed"]["estimate"])
        assert run.data.tags["fixed/method"] == cell["stats"]["fixed"]["method"]
        if cell["stats"]["fixed"]["low"] is not None:
            assert run.data.metrics["fixed/low"] == pytest.approx(100 * cell["stats"]["fixed"]["low"])
        assert run.data.metrics["improvement/fixed"] == pytest.approx(cell["improvement"]["fixed"]["estimate"])
        seeds = [by_key[k].data.metrics["fixed"] for k in cell["run_keys"]]
        assert run.data.metrics["fixed"] == pytest.approx(sum(seeds) / len(seeds))
        if cell["staleness_cost"] is not None:  # the comparisons of analysis.statistics.intervals reach MLflow too
            assert run.data.metrics["staleness_cost/fixed/p_holm"] == pytest.approx(
                cell["staleness_cost"]["fixed"]["p_holm"])
        assert not any(name.startswith("paper") for name in run.data.metrics)  # published numbers: tags
    assert cells[f"cell:{config['grid']}:grpo:lag8"].data.tags["paper.aime24"] is not None
    fixed = client.get_metric_history(by_key[key].info.run_id, "fixed")
    assert len(fixed) == 2 and fixed[0].value != fixed[1].value
    assert by_key[key].data.metrics["fixed"] == pytest.approx(100 * read_jsonl(
        GridDir.of(config).run(*EXTRA_STEP_RUN).path / "eval" / "tiny_test.jsonl")[1]["score"])  # step 10


def test_status_failed_with_reason_and_collapse_tagged(synced):
    config, client, first, _, _ = synced
    by_key = {r.data.tags["run_key"]: r for r in all_runs(client, first["experiment_id"])}
    for run in expand(config):
        found = by_key[key_of(config, run)]
        status = json.loads((GridDir.of(config).run(*run).path / "train" / "status.json").read_text())
        if run in (DIVERGED, EARLY_DIVERGED):
            assert found.info.status == "FAILED" and found.data.tags["status"] == "diverged"
            assert found.data.tags["status_reason"] == status["message"] != ""
        else:
            assert found.info.status == "FINISHED" and "status_reason" not in found.data.tags
        assert found.data.tags["collapsed"] == ("true" if run in (COLLAPSED, DIVERGED, EARLY_DIVERGED) else "false")


def test_training_curves_strided_and_stamped(synced):
    config, client, _, _, _ = synced
    other = make_grid(config["results_dir"], grid="strided")  # same store, its own experiment
    typed = Config.build(other)
    write_summary(grid_dir(other) / "summary.json", summarize(typed, collect(typed, progress=False)))
    marker = sync(typed, progress=False, max_train_points=5)  # 20 steps -> every 4th
    runs = {r.data.tags["run_key"]: r for r in all_runs(client, marker["experiment_id"])}
    expected = {("grpo", 1, 0): [1, 4, 8, 12, 16, 20], DIVERGED: [1, 4, 8, DIVERGE_STEP], EARLY_DIVERGED: [1, 3]}
    for run, steps in expected.items():
        run_id = runs[key_of(other, run)].info.run_id
        history = client.get_metric_history(run_id, "train/loss")
        assert [m.step for m in history] == steps
        # each point carries the time its step was produced (the rows' time field), in ms
        assert [m.timestamp for m in history] == [int((START_TIME + 2 * s) * 1000) for s in steps]
        # the selection task's curve too, stamped with the time of the step it evaluates
        evals = client.get_metric_history(run_id, "eval/tiny_val/score")
        assert len(evals) == len(read_jsonl(GridDir.of(other).run(*run).path / "eval" / "tiny_val.jsonl"))
        assert all(m.timestamp == int((START_TIME + 2 * m.step) * 1000) for m in evals)


def test_rows_without_time_fall_back_to_start_plus_step():
    times = layout.step_times_ms([{"step": 1}, {"step": 2, "time": None}, {"step": 3, "time": 1.5}], 1000)
    assert times == {1: 1001, 2: 1002, 3: 1500}


def test_summary_keys_are_logged_generically_with_score_units():
    cell = {"recipe": "grpo", "lag": 8, "seeds": [0, 1], "per_seed": {"fixed": [0.5, 0.6]},
            "stats": {"fixed": {"estimate": 0.55, "low": 0.5, "high": 0.6, "method": "t"},
                      "dbar": {"estimate": 0.02, "low": 0.01, "high": 0.03, "method": "t"}},
            "collapse": {"k": 1, "n": 2, "estimate": 0.5, "low": 0.1, "high": 0.9},
            "improvement": {"fixed": {"estimate": 0.75, "low": 0.5, "high": 1.0}},
            # a score difference with a test: its p logged beside its bounds
            "staleness_cost": {"fixed": {"estimate": -0.05, "low": -0.08, "high": -0.02, "p": 0.01}},
            "reference": {"aime24": 53.1}}
    metrics, tags = layout.cell_values(CellStats.from_row(cell))
    assert metrics == {"fixed": 55.0, "fixed/low": 50.0, "fixed/high": 60.0, "dbar": 0.02, "dbar/low": 0.01,
                       "dbar/high": 0.03, "collapsed/k": 1.0, "collapsed/n": 2.0, "collapsed": 0.5,
                       "collapsed/low": 0.1, "collapsed/high": 0.9, "improvement/fixed": 0.75,
                       "improvement/fixed/low": 0.5, "improvement/fixed/high": 1.0, "staleness_cost/fixed": -5.0,
                       "staleness_cost/fixed/low": -8.0, "staleness_cost/fixed/high": -2.0,
                       "staleness_cost/fixed/p": 0.01}
    assert tags == {"fixed/method": "t", "dbar/method": "t", "paper.aime24": "53.1"}
    assert layout.seed_values({"fixed": 0.4074, "collapsed": True, "best_step": 15, "status": "completed"}) == {
        "fixed": 40.74, "collapsed": 1.0, "best_step": 15.0}


def test_provenance_fields_become_tags(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = make_grid(tmp_path, seeds=(0,))
    write_json_atomic(GridDir.of(config).run("grpo", 1, 0).path / "provenance.json",
                      {"git": {"commit": "abc123", "dirty": True}, "host": "node7"})
    marker = sync(Config.build(config), progress=False, final=False)
    run = next(r for r in MlflowClient(marker["tracking_uri"]).search_runs([marker["experiment_id"]])
               if r.data.tags.get("run_key") == key_of(config, ("grpo", 1, 0)))
    assert (run.data.tags["prov.git.commit"], run.data.tags["prov.git.dirty"], run.data.tags["prov.host"]) == (
        "abc123", "True", "node7")


def test_filters_timestamps_and_a_moved_store_through_mlflow_server(synced, tmp_path):
    """The must-show REST checks, on a copy of the synced store in another folder while the
    original folder is renamed away (any absolute path left in the store would break)."""
    config, _, first, first_count, _ = synced
    original = os.path.abspath(config["results_dir"])
    moved = tmp_path / "elsewhere" / "results"
    grpo_keys = sorted(key_of(config, r) for r in expand(config) if r[0] == "grpo")
    shutil.copytree(original, moved)
    os.rename(original, original + ".away")
    try:
        with mlflow_server(moved, tmp_path / "server.log") as base:
            experiment = rest(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=" + config["grid"])
            experiment_id = experiment["experiment"]["experiment_id"]
            assert experiment_id == first["experiment_id"]
            experiments = rest(base, "/api/2.0/mlflow/experiments/search", {"max_results": 100})["experiments"]
            assert "Default" in {e["name"] for e in experiments}  # MLflow's own, created with the store
            assert all(e["artifact_location"].startswith("mlflow-artifacts:/") for e in experiments), experiments
            search = {"experiment_ids": [experiment_id], "max_results": 1000}
            assert len(rest(base, "/api/2.0/mlflow/runs/search", search)["runs"]) == first_count
            grpo = rest(base, "/api/2.0/mlflow/runs/search", {**search, "filter": "params.recipe = 'grpo'"})["runs"]
            assert sorted(run_tags(r)["run_key"] for r in grpo) == grpo_keys
            seeds = rest(base, "/api/2.0/mlflow/runs/search", {**search, "filter": f"tags.\"{KIND}\" = 'run'"})["runs"]
            assert len(seeds) == len(expand(config))
            for run in seeds:
                params = run_params(run)
                assert params["lr"] == "0.0003" and params["eval.k"] == "8"
                history = rest(base, "/api/2.0/mlflow/metrics/get-history?run_id=" + run["info"]["run_id"]
                               + "&metric_key=train/reward")["metrics"]
                stamps = [m["timestamp"] for m in sorted(history, key=lambda m: m["step"])]
                assert len(stamps) > 1 and all(a < b for a, b in zip(stamps, stamps[1:]))
            listed = rest(base, "/api/2.0/mlflow/artifacts/list?run_id=" + first["parent_run_id"])["files"]
            assert {f["path"] for f in listed} == set(report_files(config["lag_mode"])) | {"workflow_config.json", VERDICTS_ARTIFACT}
            for name in report_files(config["lag_mode"]):  # each opens, with the bytes of the grid's file
                body = rest(base, f"/get-artifact?path={name}&run_uuid={first['parent_run_id']}", raw=True)
                assert body == (moved / config["grid"] / name).read_bytes()
            verdicts = rest(base, f"/get-artifact?path={VERDICTS_ARTIFACT}&run_uuid={first['parent_run_id']}", raw=True)
            assert verdicts.decode().startswith(f"### Claims of grid {config['grid']}\n\n| claim | outcome |")
    finally:
        os.rename(original + ".away", original)


def test_summary_runs_chart_the_cell_curves_and_the_parent_carries_the_verdicts(synced, tmp_path):
    """The must-show REST check (after two syncs): every summary run has eval/<task>/score at each
    evaluation step, once, and each of its band runs that curve's low or high bound (summary.json's
    curve, in percent); a summary run names the baseline; the parent run carries each claim's verdict
    and the claims table as its description."""
    config, _, first, _, _ = synced
    summary = json.loads((grid_dir(config) / "summary.json").read_text())
    curves = {(c["recipe"], str(c["lag"])): c["curve"] for c in summary["cells"]}
    name = f"eval/{summary['test_task']}/score"
    with mlflow_server(config["results_dir"], tmp_path / "server.log") as base:
        cells = rest(base, "/api/2.0/mlflow/runs/search",
                     {"experiment_ids": [first["summary_experiment_id"]], "max_results": 100})["runs"]
        drawn = rest(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [first["comparison_experiment_id"]],
                     "filter": f"tags.\"{KIND}\" = 'drawn'", "max_results": 100})["runs"]  # not the figure run
        assert len(cells) == len(curves) and len(drawn) == 3 * len(curves)  # per cell: a summary run; mean, low, high
        for run in cells + drawn:
            params, run_id, tags = run_params(run), run["info"]["run_id"], run_tags(run)
            curve = curves[params["recipe"], params["lag"]]
            part = "estimate" if tags[KIND] == "cell" else tags["run_key"].rpartition(":")[2]
            assert len(curve) == 4 and (tags[KIND] == "drawn" or tags["baseline"] == config["baseline"])
            history = rest(base, f"/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key={name}")
            points = sorted((m["step"], m["value"]) for m in history["metrics"])
            assert points == [(p["step"], pytest.approx(100 * p[part])) for p in curve], (params, part)
        parent = rest(base, f"/api/2.0/mlflow/runs/get?run_id={first['parent_run_id']}")["run"]
        tags = run_tags(parent)
        assert summary["claims"] and {c["name"]: c["verdict"] for c in summary["claims"]} == {
            c["name"]: tags[f"claim.{c['name']}"] for c in summary["claims"]}
        assert all(tags[f"claim.{c['name']}.replication"] == f"{c['replication']:.2f}" for c in summary["claims"])
        description = tags["mlflow.note.content"]
        assert description.startswith("## Claims (confirmatory") and all(
            f"| {c.claim.name} | {c.statement} |" in description and f"**{c.verdict}**{size_text(c)}: {c.why}" in description
            for c in read_summary(grid_dir(config) / "summary.json").claims)


def test_store_location(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(tmp_path / "res") == (f"sqlite:///{tmp_path}/res/mlflow.db", "mlflow-artifacts:")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking_uri(tmp_path / "res") == ("http://127.0.0.1:5999", None)


def test_bad_grid_dir_or_unaggregated_grid_is_named(tmp_path, capsys):
    config = make_grid(tmp_path)
    with pytest.raises(SystemExit):
        main(["--grid", str(tmp_path / "elsewhere")])
    assert f"{tmp_path / 'elsewhere' / 'config.json'} does not exist: not a grid folder" in capsys.readouterr().err
    assert main(["--grid", written_grid(config)]) == 2
    assert "summary.json missing: run analysis.aggregate first" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()  # refused before any store was opened
