"""harness.hf_save: a Hugging Face save is complete only with its index and every shard it names (or a
single model.safetensors); each way a save is cut short is named."""
from __future__ import annotations

from harness.hf_save import hf_checkpoint_problem
from tests.support.slime_checkpoints import write_hf_save


def test_hf_checkpoint_problems(tmp_path):
    assert hf_checkpoint_problem(write_hf_save(tmp_path / "complete", shards_written=3)) is None
    assert hf_checkpoint_problem(write_hf_save(tmp_path / "single", shards_written=1, total_shards=1)) is None
    assert "neither model.safetensors.index.json" in hf_checkpoint_problem(
        write_hf_save(tmp_path / "killed", shards_written=2))
    lost = write_hf_save(tmp_path / "lost", shards_written=3)
    (lost / "model-00002-of-00003.safetensors").unlink()
    assert "missing: ['model-00002-of-00003.safetensors']" in hf_checkpoint_problem(lost)
    (lost / "model.safetensors.index.json").write_text("{")
    assert "is not a safetensors index" in hf_checkpoint_problem(lost)
    assert "config.json is missing" in hf_checkpoint_problem(tmp_path)
