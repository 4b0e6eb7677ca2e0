"""The slime canary (engines.slime.canary through engines.canary): the grid's first run alone to its first
step and save, through the real job script against the fake `ray`, and the driver's canary mode."""
from __future__ import annotations

import json
from argparse import Namespace

import pytest

from engines import canary as canary_entry
from engines.slime.driver import lag_loop
from grid.expand import resolve_run_config
from grid.folder import GridDir
from tests.support.fake_ray import fake_job_environment, table1_config
from tests.support.slime_cluster import FakeCluster, periodic


@pytest.mark.parametrize("mode, lag", [("interval", 8), ("constant", 1), ("bounded", 3)])
def test_the_driver_canary_trains_the_first_rollout_saves_it_whole_and_ends(mode, lag):
    cluster = FakeCluster()
    args = Namespace(start_rollout_id=0, num_rollout=544, save_interval=16, rollout_global_dataset=True)
    assert lag_loop(args, cluster, cluster, mode=mode, lag=lag, seed=0, num_rollout_per_epoch=None, get=cluster.get,
                    periodic=periodic, canary=True) is None  # a normal end: the job disposes and exits 0
    assert [r for r, _, _ in cluster.trained] == [0]
    # the save a periodic step makes, HF copy included, and nothing after it
    assert cluster.log[cluster.log.index(("train", 0)) + 1:] == [("megatron_save", 0), ("hf_save", 0)]


@pytest.fixture
def canary_job(tmp_path, monkeypatch):
    """The Table-1 grid's first run (grpo, lag 1, seed 0) as the canary rule gives it, with the fake `ray`."""
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    config = table1_config(tmp_path)
    config.update(steps=8, eval_every=4)
    config["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    folder = GridDir.of(config)
    return resolve_run_config(config, "grpo", 1, 0), folder, calls


@pytest.mark.slow  # the job script with a fake ray
def test_a_passing_canary_reports_what_it_checked_and_deletes_its_saves(canary_job):
    run_config, folder, calls = canary_job
    out = folder.path / "canary.json"
    assert canary_entry.main(["--run-dir", str(folder.canary_dir), "--config-json", json.dumps(run_config),
                              "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    checked = report["checked"]
    assert (report["recipe"], report["lag"], report["seed"]) == ("grpo", 1, 0)
    assert checked["step"]["step"] == 1 and checked["megatron_save"] == 0 and checked["hf_save"] == "iter_0"
    assert checked["rollout"]["weight_versions"] == [1]
    train = folder.canary_dir / "train"
    assert checked["fingerprint"] == json.loads((train / "fingerprint.json").read_text())["digest"]
    assert not (train / "megatron").exists() and not (train / "hf").exists()  # nothing resumes from them
    assert json.loads(calls.read_text().splitlines()[1])[:2] == ["job", "submit"]
    assert not (folder.path / "runs").exists()  # no run of the grid was touched
    # run again (a changed config): it starts from step 0, not from the last canary's rows
    assert canary_entry.main(["--run-dir", str(folder.canary_dir), "--config-json", json.dumps(run_config),
                              "--out", str(out)]) == 0
    assert [row["step"] for row in map(json.loads, (train / "metrics.jsonl").read_text().splitlines())] == [1]


@pytest.mark.slow  # the job script with a fake ray
def test_a_failing_canary_names_every_check_it_failed_and_writes_no_report(canary_job, monkeypatch, capsys):
    run_config, folder, _ = canary_job
    monkeypatch.setenv("FAKE_RAY_FAIL_AFTER", "0")  # the job dies before its first rollout
    out = folder.path / "canary.json"
    assert canary_entry.main(["--run-dir", str(folder.canary_dir), "--config-json", json.dumps(run_config),
                              "--out", str(out)]) != 0
    message = capsys.readouterr().err
    for failed in ("the job exited with code 1", "no rollout was logged", "no training step was logged",
                   "the loss hook wrote no fingerprint", "no whole Megatron save", "no whole HF save",
                   "no other train job of the grid is submitted"):
        assert failed in message, message
    assert not out.exists()
