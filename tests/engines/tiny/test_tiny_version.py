"""The tiny engine's arithmetic versions (engines/tiny/params.py): version 1 keeps every run key and
every number of before versions existed; version 2 is in the run key and provenance, trains version
1's bits where the CPU multiplies bf16 at speed, and never multiplies bf16 where it does not."""
import hashlib
from pathlib import Path

import pytest
import yaml
from torch.profiler import ProfilerActivity, profile

from engines.tiny import rollout as rollout_module
from engines.tiny.params import engine_version, resolve_engine_params
from engines.tiny.trainer import Trainer
from grid.config import validate
from grid.settings import Config
from harness.identity import run_key
from harness.io import read_json, read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.tiny_runs import config

ROOT = Path(__file__).resolve().parents[3]
# sorted run keys of config.yaml's 96 runs and field.yaml's 340, computed at 69ee496 (before versions)
BEFORE_VERSIONS = {"config.yaml": (96, "540db51c0c0ad8f6"), "workflow/presets/field.yaml": (340, "8ab501725bdfd6e6")}
LAG_METRICS = ("d/lag_mean_abs", "d/impl_mean_abs")  # what the sampler pass feeds


@pytest.mark.parametrize("preset", sorted(BEFORE_VERSIONS))
def test_the_run_keys_of_before_versions_come_back_with_version_1(preset, scratch):
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw.update(yaml.safe_load((ROOT / preset).read_text()), results_dir=str(scratch))
    raw["engine_params"] = {**raw["engine_params"], "version": 1}  # `stress` defaults to 2 since its calibration
    model = Config.build(validate(raw))
    keys = sorted(model.run_config(run)["run_key"] for run in model.runs)
    assert (len(keys), hashlib.sha256(" ".join(keys).encode()).hexdigest()[:16]) == BEFORE_VERSIONS[preset]


def test_version_1_is_the_absence_of_the_key_and_version_2_a_new_run_key(base):
    assert resolve_engine_params({"version": 1}) == resolve_engine_params({})
    assert "version" not in resolve_engine_params({}) and engine_version(resolve_engine_params({})) == 1
    assert engine_version(resolve_engine_params({"preset": "stress", "version": 2})) == 2
    assert run_key(config(base, version=1)) == run_key(config(base)) != run_key(config(base, version=2))
    for bad in (3, 0, True, "2"):
        with pytest.raises(ValueError, match="version"):
            resolve_engine_params({"version": bad})


def _train(base, folder, monkeypatch, fast_bf16: bool, **params) -> list[dict]:
    monkeypatch.setattr(rollout_module, "fast_bf16_matmuls", lambda: fast_bf16)
    trainer = Trainer(RunConfig.check(config(base, lag=2, mode="constant", steps=5, eval_every=2, **params)),
                      RunDir(folder))
    assert trainer.run() == "completed"
    return [{k: v for k, v in row.items() if k != "time"} for row in read_jsonl(folder / "train" / "metrics.jsonl")]


def test_version_2_trains_version_1s_bits_with_fast_bf16_and_skips_the_sampler_pass(base, scratch, monkeypatch):
    one = _train(base, scratch / "v1", monkeypatch, True)
    two = _train(base, scratch / "v2", monkeypatch, True, version=2)
    reported = [row["step"] for row in two if all(key in row for key in LAG_METRICS)]
    assert reported == [2, 4, 5]  # the checkpoint steps (eval_every 2) and the last
    assert two == [{k: v for k, v in row.items() if row["step"] in reported or k not in LAG_METRICS} for row in one]


def test_version_2_without_fast_bf16_samples_emulated_and_resumes_bit_for_bit(base, scratch, monkeypatch):
    """The emulated rollout (rollout_bf16.py), no bf16 matmul; a batch in flight without its sampler
    pass is saved in the resume state and restored as it was."""
    from engines.tiny import trainer as trainer_module
    from harness.engine import TimeLimitReached

    emulated = _train(base, scratch / "emulated", monkeypatch, False, rollout_dtype="bfloat16_emulated")
    two = _train(base, scratch / "v2", monkeypatch, False, version=2)
    assert [{k: v for k, v in row.items() if k not in LAG_METRICS} for row in two] == \
        [{k: v for k, v in row.items() if k not in LAG_METRICS} for row in emulated]
    stops = iter([False, False, True])  # a time-limit warning after step 3: batch 4 in flight, no sampler pass
    monkeypatch.setattr(trainer_module, "time_limit_near", lambda: next(stops, False))
    cfg = RunConfig.check(config(base, lag=2, mode="constant", steps=5, eval_every=2, version=2))
    with pytest.raises(TimeLimitReached):
        Trainer(cfg, RunDir(scratch / "resumed")).run()
    assert Trainer(cfg, RunDir(scratch / "resumed")).run() == "completed"
    resumed = read_jsonl(scratch / "resumed" / "train" / "metrics.jsonl")
    assert [{k: v for k, v in row.items() if k != "time"} for row in resumed] == two
    trainer = Trainer(cfg, RunDir(scratch / "counted"))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        trainer.generate(1)
    assert not any("c10::BFloat16" in (event.input_dtypes or []) for event in prof.events()
                   if event.name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear"))



def test_provenance_records_the_engine_version(base, scratch):
    from engines.train import run

    for version in (1, 2):
        assert run(config(base, steps=1, eval_every=1, version=version), scratch / f"v{version}") == "completed"
        attempts = read_json(scratch / f"v{version}" / "provenance.json")["attempts"]
        assert attempts[-1]["engine_version"] == version and isinstance(attempts[-1]["onednn_bf16"], bool)
