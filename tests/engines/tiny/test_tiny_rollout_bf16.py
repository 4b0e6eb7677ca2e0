"""engines/tiny/rollout_bf16.py: the bf16 engine's arithmetic in float32 (rollout_dtype bfloat16_emulated)."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from engines.tiny import task
from engines.tiny.model import ModelConfig, TinyMoELM, encode_prompt
from engines.tiny.params import resolve_engine_params
from engines.tiny.rollout import RolloutEngine
from engines.tiny.rollout_bf16 import bf16
from engines.tiny.trainer import Trainer
from harness.io import read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.tiny_runs import config

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
           "aten::_scaled_dot_product_flash_attention_for_cpu")


@pytest.fixture(scope="module", params=[1, 2], ids=["top1", "top2"])
def engines(request):
    torch.manual_seed(0)
    model = TinyMoELM(ModelConfig(top_k=request.param))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {name: RolloutEngine(model.config, name, 1.0) for name in ("float32", "bfloat16", "bfloat16_emulated")}
    for engine in out.values():
        engine.broadcast(state, 0)
    return out


def _prompts(n: int = 64) -> torch.Tensor:
    return torch.tensor([encode_prompt(p["prompt"]) for p in task.problems("train", n, seed=3)])


def test_weights_hold_bf16_values_in_float32(engines):
    emulated, native = engines["bfloat16_emulated"].model, engines["bfloat16"].model
    for (name, p), q in zip(emulated.named_parameters(), native.parameters()):
        assert p.dtype == torch.float32 and torch.equal(p, q.float()), name


@torch.no_grad()
def test_log_probabilities_are_as_far_from_float32_as_the_bf16_engines(engines):
    prompts = _prompts()
    fp32 = engines["float32"].model(prompts).logits.log_softmax(-1)
    native = engines["bfloat16"].model(prompts).logits.float().log_softmax(-1)
    emulated = engines["bfloat16_emulated"].model(prompts).logits.log_softmax(-1)
    bf16_error = float((native - fp32).abs().mean())
    assert bf16_error > 1e-3  # bf16 is measurably off float32 here, and the emulation as much
    # (on AVX512 kernels the two agree but for rare one-ulp flips; other kernels round elsewhere)
    assert float((emulated - fp32).abs().mean()) == pytest.approx(bf16_error, rel=0.25)
    assert float((emulated - native).abs().mean()) < 0.5 * bf16_error


def test_rollout_mismatch_matches_the_bf16_engines(engines):
    def impl_mismatch(name):
        values = []
        for seed in range(4):
            batch = engines[name].rollout(1, task.problems("train", 16, seed=7 + seed), 8, "partial", seed=seed)
            logmu = batch.logmu_full.gather(-1, batch.tokens[:, -batch.mask.shape[1]:, None])[..., 0]
            values.append(float((batch.logp_sampler - logmu)[batch.mask.bool()].abs().mean()))
        return sum(values) / len(values)

    native = impl_mismatch("bfloat16")
    assert impl_mismatch("bfloat16_emulated") == pytest.approx(native, rel=0.3)
    assert impl_mismatch("float32") < 0.01 * native


def test_no_bf16_matmul_when_sampling(engines):
    problems = task.problems("train", 4, seed=1)
    counts = {}
    for name in ("bfloat16", "bfloat16_emulated"):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            engines[name].rollout(1, problems, 4, "partial", seed=0)
        counts[name] = sum(event.name in MATMULS and "c10::BFloat16" in (event.input_dtypes or [])
                           for event in prof.events())
    assert counts["bfloat16"] > 0 and counts["bfloat16_emulated"] == 0


def test_bf16_rounds_to_nearest_even():
    one_ulp = 2.0 ** -7  # bf16 keeps 8 significant bits: the spacing above 1
    values = torch.tensor([1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 1 + one_ulp / 4, 3.0])
    assert bf16(values).tolist() == [1.0, 1 + 2 * one_ulp, 1.0, 3.0]


def test_engine_option_trains(base, tmp_path):
    assert resolve_engine_params({"rollout_dtype": "bfloat16_emulated"})["rollout_dtype"] == "bfloat16_emulated"
    with pytest.raises(ValueError, match="rollout_dtype"):
        resolve_engine_params({"rollout_dtype": "bf16"})
    trainer = Trainer(RunConfig.check(config(base, lag=1, steps=3, rollout_dtype="bfloat16_emulated")),
                      RunDir(tmp_path))
    assert next(trainer.engine.model.parameters()).dtype == torch.float32
    assert trainer.run() == "completed"
    rows = read_jsonl(tmp_path / "train" / "metrics.jsonl")
    assert len(rows) == 3 and all(r["d/impl_mean_abs"] > 1e-4 for r in rows)  # bf16's mismatch, not fp32's ~0


def test_a_run_stopped_and_resumed_is_bit_identical(base, tmp_path, monkeypatch):
    """The resumed engine re-broadcasts its version's snapshot, rounded again to the same bf16 values;
    Adam's moments come back from the resume state (engines/tiny/adam.py's state layout)."""
    from engines.tiny import trainer as trainer_module
    from harness.engine import TimeLimitReached

    cfg = RunConfig.check(config(base, lag=2, mode="constant", steps=5, eval_every=2,
                                 rollout_dtype="bfloat16_emulated"))
    assert Trainer(cfg, RunDir(tmp_path / "reference")).run() == "completed"
    stops = iter([False, False, True])  # a time-limit warning after step 3 (no checkpoint at step 3)
    monkeypatch.setattr(trainer_module, "time_limit_near", lambda: next(stops, False))
    with pytest.raises(TimeLimitReached):
        Trainer(cfg, RunDir(tmp_path / "resumed")).run()
    assert Trainer(cfg, RunDir(tmp_path / "resumed")).run() == "completed"

    def untimed(run):
        return [{k: v for k, v in row.items() if k != "time"} for row in read_jsonl(run / "train" / "metrics.jsonl")]

    assert untimed(tmp_path / "resumed") == untimed(tmp_path / "reference")
    final = "train/checkpoints/step_5/model.safetensors"
    assert (tmp_path / "resumed" / final).read_bytes() == (tmp_path / "reference" / final).read_bytes()
