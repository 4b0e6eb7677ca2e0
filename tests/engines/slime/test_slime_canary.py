"""The slime canary (engines.slime.canary through engines.canary): the grid's heaviest run alone through
the paths every job meets (two post-training pushes, the lag crossed, a save, a stop, a resume), through
the real job script against the fake `ray` running the driver over a fake slime, each planted fault
named; and the driver's canary mode."""
from __future__ import annotations

import json
from argparse import Namespace

import pytest

from engines import canary as canary_entry
from engines.slime.driver import canary_end, lag_loop
from grid.expand import resolve_run_config
from grid.folder import GridDir
from grid.jobs import canary_run
from grid.settings import Config
from tests.support.fake_ray import fake_eval_server, fake_job_environment, table1_config
from tests.support.slime_cluster import FakeCluster, periodic


@pytest.mark.parametrize("mode, lag", [("interval", 8), ("constant", 1), ("bounded", 3)])
def test_the_driver_canary_walks_two_pushes_and_the_lag_then_saves_stops_and_resumes_one_step(mode, lag):
    """The walk: trained until two versions after the first push sampled rollouts and one rollout was
    sampled lag steps back (canary_end), that step saved as a periodic save is (HF copy included) and the
    loop returns it, as a stop at the warning does. The resume from it: one step, its save, a normal end."""
    cluster = FakeCluster()
    args = Namespace(start_rollout_id=0, num_rollout=544, save_interval=16, rollout_global_dataset=True)
    last = lag_loop(args, cluster, cluster, mode=mode, lag=lag, seed=0, num_rollout_per_epoch=None, get=cluster.get,
                    periodic=periodic, canary=True)
    assert last == canary_end(mode=mode, lag=lag, seed=0, start=0, end=544)
    assert [r for r, _, _ in cluster.trained] == list(range(last + 1))
    assert len({push for _, _, push in cluster.trained}) >= 3  # the first push and two after training (or more)
    assert max(r - version for r, version, _ in cluster.trained) == lag
    assert cluster.log[cluster.log.index(("train", last)) + 1:] == [("megatron_save", last), ("hf_save", last)]
    resumed = FakeCluster()
    resumed.trainer_version = last + 1
    args.start_rollout_id = last + 1
    assert lag_loop(args, resumed, resumed, mode=mode, lag=lag, seed=0, num_rollout_per_epoch=None, get=resumed.get,
                    periodic=periodic, canary=True) is None  # a normal end: the job disposes and exits 0
    assert [r for r, _, _ in resumed.trained] == [last + 1]
    assert resumed.log[resumed.log.index(("train", last + 1)) + 1:] == [("megatron_save", last + 1),
                                                                        ("hf_save", last + 1)]


def test_the_canary_walks_to_step_18_at_interval_lag_8():
    """Interval lag 8: rollouts 0-8 by version 0, 9-16 by version 8 (the first push after training, at
    step 9), 17 by version 16 (the second): rollout 8 was sampled 8 steps back."""
    assert canary_end(mode="interval", lag=8, seed=0, start=0, end=544) == 17
    assert canary_end(mode="interval", lag=8, seed=0, start=18, end=544) == 18


@pytest.fixture
def canary_job(tmp_path, monkeypatch):
    """The Table-1 grid's heaviest run (grpo_r3, lag 8, seed 0: grid.jobs.canary_run) as the canary rule gives
    it, with the fake `ray` (the driver's canary over a fake slime, tests/support/canary_job.py), and the
    rule's command line (its --eval-json: the preset's eval settings, the server started through a fake
    `apptainer` running the fake SGLang, tests/support/fake_sglang.py)."""
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    config = table1_config(tmp_path)
    config.update(steps=24, eval_every=16)  # the preset's: the walk's periodic HF save at step 16
    config["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    fake_eval_server(config, tmp_path / "bin")
    model = Config.build(config)
    assert canary_run(model) == ("grpo_r3", 8, 0) and model.canary
    folder = GridDir.of(config)
    evaluation = {"tasks": model.eval.scored_tasks, "settings": model.eval.job_settings()}
    argv = ["--run-dir", str(folder.canary_dir), "--config-json", json.dumps(resolve_run_config(config, "grpo_r3", 8, 0)),
            "--eval-json", json.dumps(evaluation), "--out", str(folder.canary_path)]
    return argv, folder, calls


@pytest.mark.slow  # the job script with a fake ray
def test_a_passing_canary_reports_what_it_checked_and_deletes_its_saves(canary_job, capsys):
    """The walk to step 18 (three weight versions, a rollout 8 steps back, a save, the stop), the resume from
    it (step 19 and its save), the evaluation server started (through the preset's command prefix) on the
    published HF save of step 16, steps 18's and 19's swapped in, one AIME problem scored on each with the grid's eval
    settings; the saves deleted, no run of the grid touched; run again, it starts afresh."""
    argv, folder, calls = canary_job
    assert canary_entry.main(argv) == 0
    report = json.loads(folder.canary_path.read_text())
    checked = report["checked"]
    assert (report["recipe"], report["lag"], report["seed"]) == ("grpo_r3", 8, 0)
    assert (checked["stop_step"], checked["weight_versions"], checked["realized_lag"]) == (18, [1, 2, 3], 8)
    assert (checked["megatron_save"], checked["hf_save"]) == (17, "iter_17")
    assert (checked["resumed_megatron_save"], checked["resumed_hf_save"]) == (18, "iter_18")
    assert checked["published_steps"] == [16, 18, 19]  # the walk's periodic HF save, its stop's, the resume's
    # the fake SGLang answers every problem wrongly but at a step_2 (tests/support/fake_sglang.py)
    assert report["evaluation"] == {"aime24_avg8": {"16": 0.0, "18": 0.0, "19": 0.0}}
    rows = [json.loads(line) for line in (folder.canary_dir / "eval" / "aime24_avg8.jsonl").read_text().splitlines()]
    assert [(row["step"], row["n_problems"], row["k"], row["seed"]) for row in rows] == \
        [(step, 1, 8, 1234) for step in (16, 18, 19)]
    assert "aime24_avg8 step 19: avg@8 0.0000" in capsys.readouterr().err
    train = folder.canary_dir / "train"
    assert checked["fingerprint"] == json.loads((train / "fingerprint.json").read_text())["digest"]
    for gone in ("megatron", "hf", "checkpoints"):  # nothing resumes from them or scores them again
        assert not (train / gone).exists(), gone
    submits = [json.loads(line)[:2] for line in calls.read_text().splitlines()].count(["job", "submit"])
    assert submits == 2 and not (folder.path / "runs").exists()  # two canary jobs; no run of the grid touched
    # run again (a changed config): it starts from step 0, not from the last canary's rows or scores
    assert canary_entry.main(argv) == 0
    assert [row["step"] for row in map(json.loads, (train / "metrics.jsonl").read_text().splitlines())] == \
        list(range(1, 20))
    assert "aime24_avg8 step 18: avg@8" in capsys.readouterr().err  # scored again


@pytest.mark.slow  # the job script with a fake ray
@pytest.mark.parametrize("variable, fault, named", [
    ("FAKE_RAY_CANARY_FAULT", "push", "the walk (first job): 2 SGLang weight version(s) [1, 2] in"),
    ("FAKE_RAY_CANARY_FAULT", "lag", "the walk (first job): no rollout in"),
    ("FAKE_RAY_CANARY_FAULT", "save", "the walk (first job): no whole HF save of step 18"),
    ("FAKE_RAY_CANARY_FAULT", "stop", "the walk (first job) did not stop after step 18 as at the time limit"),
    ("FAKE_RAY_CANARY_FAULT", "resume", "the resume (second job) exited with code 1"),
    # SGLang cannot load the resumed job's HF save (update_weights_from_disk refuses it)
    ("FAKE_SGLANG_REFUSE", "step_19", "the evaluation (python -m eval.score, one problem of aime24_avg8) of steps "
                                      "[16, 18, 19] in {checkpoints} exited with code 2: "),
])
def test_a_fault_planted_on_the_path_fails_the_canary_naming_it(canary_job, monkeypatch, capsys, variable, fault,
                                                                named):
    argv, folder, calls = canary_job
    monkeypatch.setenv(variable, fault)
    assert canary_entry.main(argv) != 0
    message = capsys.readouterr().err
    checkpoints = folder.canary_dir / "train" / "checkpoints"
    assert named.format(checkpoints=checkpoints) in message, message
    assert "no other train job of the grid is submitted" in message, message
    if variable == "FAKE_SGLANG_REFUSE":  # the scorer's own words name the save it could not load
        assert f"refused to load {checkpoints / 'step_19'}: HTTP 400" in message, message
    assert not folder.canary_path.exists() and not (folder.path / "runs").exists()
    assert [json.loads(line)[:2] for line in calls.read_text().splitlines()].count(["job", "submit"]) <= 2


@pytest.mark.slow  # the job script with a fake ray
def test_a_failing_canary_names_every_check_it_failed_and_writes_no_report(canary_job, monkeypatch, capsys):
    argv, folder, _ = canary_job
    monkeypatch.setenv("FAKE_RAY_FAIL_AFTER", "0")  # the job dies before its first rollout
    assert canary_entry.main(argv) != 0
    message = capsys.readouterr().err
    for failed in ("the walk (first job) exited with code 1", "did not stop after step 18",
                   "0 SGLang weight version(s) []", "sampled 8 steps back (largest realized lag None)",
                   "holds steps [], not 1-18", "the loss hook wrote no fingerprint",
                   "no whole Megatron save of step 18", "no whole HF save of step 18",
                   "no other train job of the grid is submitted"):
        assert failed in message, message
    assert not folder.canary_path.exists()
