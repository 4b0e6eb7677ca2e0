"""The tiny engine's canary (engines.tiny.canary through engines.canary, config key canary): the cluster canary's
steps on the tiny trainer (two broadcasts of trained weights, the lag crossed, a save, a stop, a resume, one
problem scored by the grid's eval command on its checkpoints), and a fault planted at each failing it by name."""
from __future__ import annotations

import json
import shutil

import pytest

import engines.tiny.canary
from engines import canary as canary_entry
from engines.train import run as train
from grid.config import ConfigError, load, validate
from grid.settings import Config
from harness.lag import canary_step
from tests.support.paths import ROOT
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows

RUN = {"recipe": "grpo_r3", "lag": 3, "mode": "interval", "steps": 12, "eval_every": 5}
EVALUATION = {"tasks": ["tiny_test"], "settings": {"k": 2, "seed": 1234}}  # back end null: the engine's (tiny)


def canary_main(base, folder, evaluation=EVALUATION) -> int:
    """engines.canary as the rule runs it in the grid ``folder``: the base model the grid's own (``base``, relative)."""
    shutil.copytree(base, folder / "base")
    run_config = {**config(base, **RUN), "base_model": "base"}
    return canary_entry.main(["--run-dir", str(folder / "canary"), "--config-json", json.dumps(run_config),
                              "--eval-json", json.dumps(evaluation), "--out", str(folder / "canary.json")])


def test_the_canary_stop_is_where_two_trained_versions_sampled_and_the_lag_was_crossed():
    """Interval lag 3: steps 2-4 by version 0 (step 4 sampled 3 steps back), 5-7 by version 3, 8 by version 6;
    interval lag 8 (the Table-1 grid's): step 18, the slime driver's canary_end + 1."""
    assert canary_step(3, "interval", 0, 100) == 8
    assert canary_step(8, "interval", 0, 544) == 18
    assert canary_step(1, "constant", 0, 100) == 4  # steps 3 and 4 sampled by versions 1 and 2, 1 step back
    assert canary_step(8, "interval", 0, 10) == 10  # a shorter run: its last step


def test_a_tiny_canary_walks_the_cluster_path_and_scores_one_problem(base, tmp_path, capsys):
    """The walk stops after step 8 with its save (checkpoint and resume state), the resume trains step 9
    from it and saves it; the evaluation scores one problem on each checkpoint (5, 8, 9) with the tiny back
    end; the checkpoints are deleted; the rows are an uninterrupted run's."""
    assert canary_main(base, tmp_path) == 0
    report = json.loads((tmp_path / "canary.json").read_text())
    assert (report["recipe"], report["lag"]) == ("grpo_r3", 3)
    assert report["checked"] == {"stop_step": 8, "policy_versions": [0, 3, 6], "realized_lag": 3, "saves": [8, 9],
                                 "published_steps": [5, 8, 9]}
    assert sorted(report["evaluation"]["tiny_test"]) == ["5", "8", "9"]
    rows = [json.loads(line) for line in (tmp_path / "canary" / "eval" / "tiny_test.jsonl").read_text().splitlines()]
    assert [(row["step"], row["n_problems"], row["k"]) for row in rows] == [(5, 1, 2), (8, 1, 2), (9, 1, 2)]
    assert "tiny_test step 9: avg@2" in capsys.readouterr().err
    assert not (tmp_path / "canary" / "train" / "checkpoints").exists()
    assert train(config(base, **RUN), tmp_path / "whole") == "completed"
    assert untimed_rows(tmp_path / "canary" / "train" / "metrics.jsonl") == \
        untimed_rows(tmp_path / "whole" / "train" / "metrics.jsonl")[:9]


def lose_the_save(monkeypatch):
    """The walk's resume state is gone when the second job starts: it trains from step 0 again."""
    job = engines.tiny.canary.job

    def planted(run_config, run, stop):
        if stop == 9:
            shutil.rmtree(run.train_dir / "resume")
        return job(run_config, run, stop)
    monkeypatch.setattr(engines.tiny.canary, "job", planted)


@pytest.mark.parametrize("fault, named", [
    ("save", "the walk (first job): no checkpoint of step 8"),
    ("stop", "the walk (first job) ended with status 'completed', not stopped after step 8 as at the time limit"),
    ("resume", "the resume (second job) rewrote steps 1-8 of"),
    ("evaluation", "the evaluation (python -m eval.score, one problem of tiny_nope) of steps [5, 8, 9] in "
                   "{checkpoints} exited with code 2: "),
])
def test_a_fault_planted_on_the_tiny_path_fails_the_canary_naming_it(base, tmp_path, monkeypatch, capsys, fault, named):
    evaluation = EVALUATION
    if fault == "save":  # the checkpoint never reaches the disk
        monkeypatch.setattr(engines.tiny.trainer.Trainer, "publish_checkpoint", lambda self: None)
    elif fault == "stop":  # the trainer ignores the stop and runs to its last step
        monkeypatch.setattr(engines.tiny.canary, "Trainer",
                            lambda run_config, run, canary_stop: engines.tiny.trainer.Trainer(run_config, run))
    elif fault == "resume":
        lose_the_save(monkeypatch)
    else:  # the scorer cannot score what the grid asks (a task it does not know)
        evaluation = {**EVALUATION, "tasks": ["tiny_nope"]}
    assert canary_main(base, tmp_path, evaluation) != 0
    message = capsys.readouterr().err
    assert named.format(checkpoints=tmp_path / "canary" / "train" / "checkpoints") in message, message
    assert "no other train job of the grid is submitted" in message and not (tmp_path / "canary.json").exists()


def test_a_tiny_grid_runs_the_canary_only_when_its_config_asks():
    demo = load(ROOT / "config.yaml")
    assert "canary" not in demo and not Config.build(demo).canary  # the engine's default: runs of seconds
    assert not Config.build(validate({**demo, "canary": None})).canary
    assert Config.build(validate({**demo, "canary": True})).canary
    with pytest.raises(ConfigError, match="canary"):
        validate({**demo, "canary": "yes"})
