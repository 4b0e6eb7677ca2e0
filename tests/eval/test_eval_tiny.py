"""Real tiny-engine checkpoints scored through lm-eval: end to end, determinism, kill + resume."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.tiny.checkpoint import save_checkpoint
from engines.tiny.model import ModelConfig, TinyMoELM
from engines.tiny.params import resolve_engine_params
from engines.tiny.warmstart import exact_match, train_base
from eval.lm_model import TinyCheckpointLM
from eval.score import score_run
from harness.io import read_jsonl
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

N = 64  # problems per tiny task in these tests
SETTINGS = {"k": 8, "seed": 11, "temperature": 1.0, "top_p": 1.0, "max_gen_toks": 7,
            "backend": "tiny", "problems": {"tiny_val": N, "tiny_test": N}}


@pytest.fixture(scope="module")
def models():
    """An untrained model and a briefly warm-started one (greedy exact match well above 0)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    untrained = TinyMoELM(ModelConfig())
    trained = train_base(resolve_engine_params({"warmstart_steps": 60}))
    return untrained, trained


def make_run(root: Path, models, steps=(1, 2)) -> Path:
    untrained, trained = models
    for step in steps:
        save_checkpoint(untrained if step == 1 else trained, root / "train" / "checkpoints" / f"step_{step}")
    return root


def test_real_checkpoints_end_to_end_through_lm_eval(tmp_path, models):
    run = make_run(tmp_path / "run", models)
    rows = score_run(run, ["tiny_val"], SETTINGS)
    assert [r["step"] for r in rows] == [1, 2]
    assert read_jsonl(run / "eval" / "tiny_val.jsonl") == rows
    for row in rows:
        assert set(row) == {"step", "score", "k", "per_problem", "n_problems", "pass_at_k",
                            "maj_at_k", "seed", "task", "task_version", "eval_key"}
        assert row["n_problems"] == len(row["per_problem"]) == N
        assert all(0 <= c <= 8 for c in row["per_problem"])
        assert row["score"] == pytest.approx(sum(row["per_problem"]) / (8 * N), abs=1e-12)
        assert row["pass_at_k"] == pytest.approx(sum(c > 0 for c in row["per_problem"]) / N, abs=1e-12)
        assert row["maj_at_k"] <= row["pass_at_k"]
    assert rows[0]["score"] < rows[1]["score"]  # the trained weights were really loaded
    assert 0 < rows[1]["score"] < 1 and rows[1]["pass_at_k"] > rows[1]["score"]  # samples differ
    # Same config + seed -> same numbers; scoring again appends nothing.
    again = make_run(tmp_path / "again", models)
    assert score_run(again, ["tiny_val"], SETTINGS) == rows
    assert score_run(run, ["tiny_val"], SETTINGS) == []


@pytest.fixture
def built(monkeypatch) -> list[str]:
    """The checkpoints whose model eval.score builds, in order, one entry per build."""
    names, models = [], TinyCheckpointLM.models

    @contextlib.contextmanager
    def counted(settings, checkpoints):
        with models(settings, checkpoints) as model_for:
            def counted_model_for(checkpoint):
                names.append(checkpoint.name)
                return model_for(checkpoint)

            yield counted_model_for

    monkeypatch.setattr(TinyCheckpointLM, "models", counted)
    return names


def test_one_model_per_checkpoint_scores_every_task_as_if_alone(tmp_path, models, built):
    alone = {task: make_run(tmp_path / task, models) for task in ("tiny_test", "tiny_val")}
    for task, run in alone.items():  # each task alone, as one job per run and task did
        score_run(run, [task], SETTINGS)
    built.clear()
    run = make_run(tmp_path / "both", models)
    rows = score_run(run, ["tiny_test", "tiny_val"], SETTINGS)
    assert built == ["step_1", "step_2"]  # one model per checkpoint, for both tasks
    assert [(r["step"], r["task"]) for r in rows] == [(1, "tiny_test"), (1, "tiny_val"), (2, "tiny_test"),
                                                      (2, "tiny_val")]
    for task, other in alone.items():  # bit-identical: each task keeps its own lm-eval call and seeds
        assert (run / "eval" / f"{task}.jsonl").read_bytes() == (other / "eval" / f"{task}.jsonl").read_bytes()


def test_a_new_or_changed_task_is_the_only_one_scored(tmp_path, models, built):
    run = make_run(tmp_path / "run", models)
    val = score_run(run, ["tiny_val"], SETTINGS)  # the scores of a job that had only tiny_val
    added = score_run(run, ["tiny_test", "tiny_val"], SETTINGS)
    assert [(r["step"], r["task"]) for r in added] == [(1, "tiny_test"), (2, "tiny_test")]
    assert read_jsonl(run / "eval" / "tiny_val.jsonl") == val
    # One task's problem count changed: its key changed, the other's did not.
    built.clear()
    changed = score_run(run, ["tiny_test", "tiny_val"], {**SETTINGS, "problems": {"tiny_test": N, "tiny_val": 32}})
    assert [(r["step"], r["task"], r["n_problems"]) for r in changed] == [(1, "tiny_val", 32), (2, "tiny_val", 32)]
    assert built == ["step_1", "step_2"]
    assert read_jsonl(run / "eval" / "tiny_test.jsonl") == added
    # Back to the first settings: every score is kept, and no model is built for nothing.
    built.clear()
    assert score_run(run, ["tiny_test", "tiny_val"], SETTINGS) == [] and built == []
    assert read_jsonl(run / "eval" / "tiny_val.jsonl") == val


def test_greedy_score_matches_the_engines_own_exact_match(tmp_path, models):
    run = make_run(tmp_path / "run", models, steps=(2,))
    row = score_run(run, ["tiny_val"], {**SETTINGS, "temperature": 0.0, "problems": {"tiny_val": 256}})[0]
    assert set(row["per_problem"]) <= {0, 8}  # greedy: all k samples agree
    assert row["score"] == pytest.approx(exact_match(models[1], "validation", 256), abs=1e-12)
    assert row["score"] == row["pass_at_k"] == row["maj_at_k"]


def test_val_and_test_tasks_use_disjoint_problems():
    from eval.score import load_task
    val = load_task("tiny_val", SETTINGS)["tasks"]["tiny_val"]
    test = load_task("tiny_test", SETTINGS)["tasks"]["tiny_test"]
    prompts = [{d["prompt"] for d in task.test_docs()} for task in (val, test)]
    assert len(prompts[0]) == len(prompts[1]) == N and not prompts[0] & prompts[1]


def cli(run: Path, settings: dict) -> list[str]:
    return [sys.executable, "-m", "eval.score", "--run-dir", str(run), "--tasks", "tiny_test",
            "--settings-json", json.dumps(settings)]


@pytest.mark.slow  # a scoring process killed and rerun
def test_killed_scoring_resumes_without_rescoring(tmp_path, models):
    steps = (1, 2, 3, 4, 5, 6)
    settings = {**SETTINGS, "problems": {"tiny_test": 512}}
    reference = make_run(tmp_path / "reference", models, steps)
    score_run(reference, ["tiny_test"], settings)

    run = make_run(tmp_path / "killed", models, steps)
    out = run / "eval" / "tiny_test.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    scores = out.with_name(".tiny_test.scores.jsonl")  # kept outside the declared output
    proc = subprocess.Popen(cli(run, settings), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: scores.exists() and scores.read_text().strip(), "the first score line", proc)
    proc.send_signal(signal.SIGKILL)  # half way: after the first checkpoint line
    proc.wait()
    partial = read_jsonl(scores)
    assert 1 <= len(partial) < len(steps), f"kill came too late: {len(partial)} lines"
    assert not out.exists(), "the declared output appears only when every checkpoint is scored"
    assert [p.name for p in out.parent.iterdir()] == [scores.name]  # no temp file left behind

    done = subprocess.run(cli(run, settings), cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{len(steps) - len(partial)} checkpoint(s)" in done.stderr  # only the rest was scored
    assert out.read_text() == (reference / "eval" / "tiny_test.jsonl").read_text()
    assert [r["step"] for r in read_jsonl(out)] == list(steps)


def test_scores_are_reused_only_under_the_same_settings(tmp_path, models):
    run = make_run(tmp_path / "run", models)
    out = run / "eval" / "tiny_val.jsonl"
    first = score_run(run, ["tiny_val"], SETTINGS)
    # Settings that change a score re-score every checkpoint and replace the output...
    other = score_run(run, ["tiny_val"], {**SETTINGS, "seed": 12})
    assert [r["step"] for r in other] == [1, 2]
    assert {r["eval_key"] for r in other}.isdisjoint(r["eval_key"] for r in first)
    assert read_jsonl(out) == other
    # ...and back: the first scores are kept (as after Snakemake deleted the output to rerun it).
    out.unlink()
    assert score_run(run, ["tiny_val"], SETTINGS) == []
    assert read_jsonl(out) == first
    # What aggregation reads, and other tasks' problem counts, change no score.
    aggregation_only = {**SETTINGS, "tasks": ["tiny_test"], "fixed_step": 2,
                        "problems": {"tiny_val": N, "tiny_test": 7}}
    assert score_run(run, ["tiny_val"], aggregation_only) == []


def test_missing_checkpoint_files_fail_before_any_line(tmp_path, models):
    run = make_run(tmp_path / "run", models, steps=(1, 2))
    (run / "train" / "checkpoints" / "step_2" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"step_2/model\.safetensors"):
        score_run(run, ["tiny_val"], SETTINGS)
    assert not (run / "eval").exists()
    shutil.rmtree(run / "train" / "checkpoints")
    with pytest.raises(ValueError, match="no checkpoints"):
        score_run(run, ["tiny_val"], SETTINGS)


def test_the_scoring_benchmark_runs(monkeypatch, capsys):
    """benchmarks/bench_eval_score scores its own temp checkpoints (it once stopped at a missing config.json)."""
    from benchmarks import bench_eval_score

    monkeypatch.setattr(sys, "argv", ["bench_eval_score", "--checkpoints", "2", "--problems", "4", "--k", "2"])
    bench_eval_score.main()
    assert "scored 2 checkpoints x 4 problems x k=2 (16 samples)" in capsys.readouterr().out
