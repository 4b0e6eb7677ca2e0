"""Bad input to the scorer: a clear error naming the key or file, before any line is written."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eval.score import ScoreError, check_settings, main, score_run
from grid.config import load
from harness.lock import RunLocked, writer_lock
from tests.support.paths import FIXTURES, ROOT


@pytest.fixture
def run(tmp_path) -> Path:
    path = tmp_path / "run" / "train" / "checkpoints" / "step_1"
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return tmp_path / "run"


def server_settings(**extra) -> dict:
    return {"backend": "server", "server": {"url": "http://127.0.0.1:9"}, **extra}


def test_unknown_task_lists_the_known_ones(run, capsys):
    with pytest.raises(ScoreError, match=r"unknown eval task 'aime25'.*aime24_avg8.*tiny_test.*tiny_val"):
        score_run(run, ["aime25"], server_settings())
    assert main(["--run-dir", str(run), "--tasks", "tiny_val", "aime25", "--settings-json", "{}"]) == 2
    assert "unknown eval task 'aime25'" in capsys.readouterr().err
    assert not (run / "eval").exists() and not (run / "locks").exists()  # every task loads before any write


@pytest.mark.parametrize("tasks", [[], ["tiny_val", "tiny_test", "tiny_val"]])
def test_each_task_is_named_once(run, tasks):
    with pytest.raises(ScoreError, match="each eval task to score once, and at least one"):
        score_run(run, tasks, server_settings())


def test_a_task_scored_elsewhere_stops_the_whole_job(run):
    # One job per run holds every task's lock: another writer of any one of them stops it before it writes.
    with writer_lock(run / "locks" / "evaluate-tiny_val.lock", "evaluate tiny_val"):
        with pytest.raises(RunLocked, match=f"evaluate-tiny_val.lock is held .*pid {os.getpid()}"):
            score_run(run, ["tiny_test", "tiny_val"], server_settings())
    assert not (run / "eval").exists()
    with writer_lock(run / "locks" / "evaluate-tiny_test.lock", "evaluate tiny_test"):
        pass  # the lock it took first was released


@pytest.mark.parametrize("data, message", [
    (FIXTURES / "aime_empty.jsonl", "empty"),
    (FIXTURES / "does_not_exist.jsonl", "aime24 data file not found"),
])
def test_empty_or_missing_dataset(run, data, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message) as caught:
        score_run(run, ["aime24_avg8"], server_settings(data={"aime24": str(data)}))
    assert data.name in str(caught.value)
    assert not (run / "eval").exists()


def test_dataset_without_an_answer_column(run, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"ID": "1", "Problem": "1+1?"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: no 'answer' column"):
        score_run(run, ["aime24_avg8"], server_settings(data={"aime24": str(bad)}))


@pytest.mark.parametrize("key, value", [
    ("k", 0), ("k", 2.5), ("k", True), ("temperature", -1), ("top_p", 0), ("top_p", 1.5),
    ("max_gen_toks", 0), ("seed", "1"), ("backend", "vllm"),
])
def test_bad_settings_name_the_key(key, value):
    with pytest.raises(ScoreError, match=f"eval.{key}"):
        check_settings({key: value})


def test_server_backend_needs_a_url():
    with pytest.raises(ScoreError, match="eval.server.url"):
        check_settings({"backend": "server", "server": {}})


def test_missing_checkpoints(tmp_path, run):
    with pytest.raises(ScoreError, match=r"no checkpoints \(step_<N>/\) under .*nowhere/train/checkpoints"):
        score_run(tmp_path / "nowhere", ["aime24_avg8"], server_settings())
    (run / "train" / "checkpoints" / "step_1" / "config.json").unlink()
    with pytest.raises(ScoreError, match=r"step_1/config\.json is missing"):
        score_run(run, ["aime24_avg8"], server_settings(data={"aime24": str(FIXTURES / "aime_mini.jsonl")}))
    assert not (run / "eval").exists()


def test_defaults_are_the_config_schemas():
    # One source of defaults: the scorer given nothing scores as the workflow's config would.
    workflow_eval = load(ROOT / "config.yaml", {"eval": {"tasks": ["tiny_test"]}})["eval"]
    assert check_settings({}) == {key: value for key, value in workflow_eval.items() if key != "tasks"}
    assert check_settings({})["seed"] == 1234


@pytest.mark.slow  # a subprocess importing lm-eval
def test_hub_dataset_offline_says_how_to_fix(run):
    # eval.score turns the HF offline switches on before datasets is imported; nothing is cached here.
    with pytest.raises(ConnectionError, match=r"Maxwell-Jia/AIME_2024.*eval\.data\.aime24"):
        score_run(run, ["aime24_avg8"], server_settings())
    assert not (run / "eval").exists()


def test_run_diverged_before_its_first_checkpoint_gets_an_empty_curve(tmp_path):
    run = tmp_path / "run"
    (run / "train").mkdir(parents=True)
    (run / "train" / "status.json").write_text(json.dumps({"status": "diverged", "step": 3, "message": "nan"}))
    settings = server_settings(data={"aime24": str(FIXTURES / "aime_mini.jsonl")})
    assert score_run(run, ["aime24_avg8"], settings) == []
    assert (run / "eval" / "aime24_avg8.jsonl").read_text() == ""
    (run / "train" / "status.json").write_text(json.dumps({"status": "completed", "step": 3, "message": ""}))
    with pytest.raises(ScoreError, match="no checkpoints"):
        score_run(run, ["aime24_avg8"], settings)


@pytest.mark.parametrize("tasks", [[], ["aime24_avg8", "aime24_avg8"], "aime24_avg8"])
def test_tasks_must_be_a_list_of_distinct_names(tmp_path, tasks):
    with pytest.raises(ScoreError, match="each eval task to score once"):
        score_run(tmp_path, tasks, server_settings())
