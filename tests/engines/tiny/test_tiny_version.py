"""The tiny engine's arithmetic versions (engines/tiny/params.py): version 1 keeps every run key and
every number of before versions existed; version 2 is in the run key and provenance, trains version
1's bits where the CPU multiplies bf16 at speed, and never multiplies bf16 where it does not; version 3
computes version 2's function with each prompt's positions once per group and grouped experts."""
import hashlib
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch.profiler import ProfilerActivity, profile

from engines.tiny import rollout as rollout_module
from engines.tiny.checkpoint import load_model
from engines.tiny.model import generate, use_grouped_experts
from engines.tiny.params import arithmetic_version, resolve_engine_params
from engines.tiny.prefix import forward_rows
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
BF16_CHECKED = ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear", "aten::_grouped_mm")


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
    assert "version" not in resolve_engine_params({}) and arithmetic_version(resolve_engine_params({})) == 1
    assert arithmetic_version(resolve_engine_params({"preset": "stress", "version": 2})) == 2
    assert run_key(config(base, version=1)) == run_key(config(base)) != run_key(config(base, version=2))
    assert arithmetic_version(resolve_engine_params({"version": 3})) == 3
    assert run_key(config(base, version=3)) not in (run_key(config(base)), run_key(config(base, version=2)))
    for bad in (4, 0, True, "2"):
        with pytest.raises(ValueError, match="version"):
            resolve_engine_params({"version": bad})


def _train(base, folder, monkeypatch, fast_bf16: bool, recipe="grpo", **params) -> list[dict]:
    monkeypatch.setattr(rollout_module, "fast_bf16_matmuls", lambda: fast_bf16)
    trainer = Trainer(RunConfig.check(config(base, recipe, lag=2, mode="constant", steps=5, eval_every=2, **params)),
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
                   if event.name in BF16_CHECKED)



def test_provenance_records_the_arithmetic_version(base, scratch):
    from engines.train import run

    for version in (1, 2, 3):
        assert run(config(base, steps=1, eval_every=1, version=version), scratch / f"v{version}") == "completed"
        attempts = read_json(scratch / f"v{version}" / "provenance.json")["attempts"]
        assert attempts[-1]["arithmetic_version"] == version and isinstance(attempts[-1]["onednn_bf16"], bool)


@pytest.mark.parametrize("replayed", [False, True])
def test_version_3_computes_version_2s_function_with_shared_prompts_and_grouped_experts(base, replayed):
    """forward_shared_prefix with grouped experts against the row-by-row forward with the per-expert loop:
    the same logits, routing and gradients up to float32 rounding, groups cut by the rows included."""
    torch.manual_seed(0)
    model = load_model(base)
    prompts = torch.randint(0, 10, (4, 8))
    tokens = torch.cat([prompts.repeat_interleave(3, 0), torch.randint(0, 13, (12, 6))], 1)
    replay = torch.randint(0, model.config.experts, (12, 14, model.config.layers, 1)).expand(-1, -1, -1, 2) \
        .clone() if replayed else None
    if replayed:
        replay[..., 1] = (replay[..., 0] + 1) % model.config.experts  # two distinct experts per position
        replay[:, :8] = replay[::3, :8].repeat_interleave(3, 0)  # the engine's prompt routing, once per group
    rows = slice(2, 10)  # groups cut: 1, 3, 3 and 1 of their rows
    row_by_row = model(tokens[rows], replay=None if replay is None else replay[rows])
    grads = torch.autograd.grad(row_by_row.logits.square().sum(), list(model.parameters()))
    use_grouped_experts(model)
    shared = forward_rows(model, tokens, rows, replay, 8, samples=3)
    shared_grads = torch.autograd.grad(shared.logits.square().sum(), list(model.parameters()))
    assert torch.allclose(shared.logits, row_by_row.logits, atol=1e-5)
    assert torch.equal(shared.routing, row_by_row.routing)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(shared_grads, grads))


def test_version_3_samples_a_prompt_once_for_its_samples(base):
    model = load_model(base).eval()
    prompts = torch.randint(0, 10, (4, 8), generator=torch.Generator().manual_seed(1))
    each = generate(model, prompts.repeat_interleave(3, 0), 7, temperature=1.0, top_p=1.0,
                    generator=torch.Generator().manual_seed(2))
    once = generate(use_grouped_experts(model), prompts, 7, temperature=1.0, top_p=1.0,
                    generator=torch.Generator().manual_seed(2), repeats=3)
    assert once.tokens.shape == each.tokens.shape and once.routing.shape == each.routing.shape
    assert torch.equal(once.tokens[:, :9], each.tokens[:, :9])  # the prompts and the first token sampled
    assert torch.allclose(once.logp_full[:, 0], each.logp_full[:, 0], atol=1e-5)


def test_version_3_trains_with_groups_cut_by_minibatches_and_resumes_bit_for_bit(base, scratch, monkeypatch):
    """R3 replay, top_k 2, the KL term, 3 rows per minibatch (groups of 4 cut), the emulated rollout: no
    bf16 matmul, grouped ones included; a time-limit stop and its retry end with the uninterrupted bits."""
    from engines.tiny import trainer as trainer_module
    from harness.engine import TimeLimitReached

    params = {"version": 3, "prompts_per_step": 3, "minibatches": 4, "kl_coef": 0.01}
    whole = _train(base, scratch / "whole", monkeypatch, False, recipe="grpo_r3", **params)
    assert len(whole) == 5 and all(math.isfinite(row["loss"]) for row in whole)
    assert all(row["routing/mismatch_rate"] == 0 for row in whole)  # R3: the engine's routing replayed
    stops = iter([False, False, True])
    monkeypatch.setattr(trainer_module, "time_limit_near", lambda: next(stops, False))
    cfg = RunConfig.check(config(base, "grpo_r3", lag=2, mode="constant", steps=5, eval_every=2, **params))
    with pytest.raises(TimeLimitReached):
        Trainer(cfg, RunDir(scratch / "resumed")).run()
    assert Trainer(cfg, RunDir(scratch / "resumed")).run() == "completed"
    resumed = read_jsonl(scratch / "resumed" / "train" / "metrics.jsonl")
    assert [{k: v for k, v in row.items() if k != "time"} for row in resumed] == whole
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        Trainer(cfg, RunDir(scratch / "counted")).generate(1)
    assert any(event.name == "aten::_grouped_mm" for event in prof.events())
    assert not any("c10::BFloat16" in (event.input_dtypes or []) for event in prof.events()
                   if event.name in BF16_CHECKED)
