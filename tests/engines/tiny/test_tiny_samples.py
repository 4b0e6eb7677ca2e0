"""engines/tiny/samples.py: a run keeps a few sampled completions per evaluation step (issue 65), and
engines/tiny/batch.py logs the responses' lengths per step: outputs that change none of the run's numbers."""
import hashlib
import json

import engines.tiny.batch
import engines.tiny.trainer
from engines.tiny.samples import PROMPTS
from engines.train import run
from harness.run import RunDir
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows


def test_a_run_keeps_its_completions_at_the_evaluation_steps_and_the_same_numbers(base, tmp_path, monkeypatch):
    cfg = config(base, recipe="grpo")
    assert run(cfg, tmp_path / "kept") == "completed"
    kept = RunDir(tmp_path / "kept")
    rows = kept.read_samples()
    assert sorted({row["step"] for row in rows}) == [2, 4, 6]  # the checkpoints the evaluation scores
    assert all(sum(row["step"] == step for row in rows) <= PROMPTS for step in (2, 4, 6))
    for row in rows:
        assert len(row["prompt"].split()) == 6 and set(row["prompt"].replace(" ", "")) <= set("0123456789")
        assert 0 <= row["reward"] <= 1 and 1 <= row["length"] <= 7 and row["log_ratio_behaviour_target"] != 0
        assert isinstance(row["completion"], str) and row["policy_version"] <= row["step"] - 1
    assert kept.samples_path.stat().st_size < 4096  # bounded: a few hundred bytes per evaluation step
    recorded = kept.read_provenance()["attempts"][-1]["samples"]  # the provenance names it
    assert recorded["file"] == "train/samples.jsonl" and recorded["rows"] == len(rows)
    assert recorded["sha256"] == hashlib.sha256(kept.samples_path.read_bytes()).hexdigest()
    # the responses' lengths per step: the kept ones are among the step's batch
    trained = [json.loads(row) for row in untimed_rows(kept.metrics_path)]
    metrics = {row["step"]: row for row in trained}
    assert all(1 <= metrics[s]["length/mean"] <= metrics[s]["length/max"] <= 7 for s in metrics)
    assert all(row["length"] <= metrics[row["step"]]["length/max"] for row in rows)
    # outputs, not inputs: without either (no samples file, no length computed) the run trains to the same numbers
    monkeypatch.setattr(engines.tiny.trainer, "keep_samples", lambda run_dir, rows: None)
    monkeypatch.setattr(engines.tiny.batch, "response_lengths", lambda mask: {})
    assert run(cfg, tmp_path / "without") == "completed"
    assert not RunDir(tmp_path / "without").samples_path.exists()
    without = untimed_rows(RunDir(tmp_path / "without").metrics_path)
    assert all("length/mean" not in row for row in without)
    assert [json.dumps({k: v for k, v in row.items() if not k.startswith("length/")}, sort_keys=True)
            for row in trained] == without
