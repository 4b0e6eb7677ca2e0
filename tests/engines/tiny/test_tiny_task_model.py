"""The tiny engine's task, model and checkpoints: the interface evaluation codes against."""
import json

import pytest
import torch

from engines.tiny import task
from engines.tiny.checkpoint import load_policy, save_checkpoint
from engines.tiny.model import ModelConfig, TinyMoELM, decode_response, encode_prompt, generate
from engines.tiny.params import resolve_engine_params


def test_splits_are_disjoint_deterministic_and_correct():
    splits = {s: task.problems(s, 300, seed=1) for s in task.SPLITS}
    prompts = {s: {p["prompt"] for p in ps} for s, ps in splits.items()}
    assert all(len(p) == 300 for p in prompts.values())  # distinct within a draw
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    assert task.problems("test", 300, seed=1) == splits["test"]
    assert task.problems("test", 300, seed=2) != splits["test"]
    for p in splits["train"]:
        assert p["answer"] == " ".join(sorted(p["prompt"].split()))
        assert len(p["prompt"].split()) == task.DIGITS


def test_task_errors_and_scoring():
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        task.problems("dev", 3)
    assert task.is_correct(" 1 2  3\n", "1 2 3")
    assert not task.is_correct("1 2 3 4", "1 2 3")
    assert task.partial_credit("1 2 9", "1 2 3") == pytest.approx(2 / 3)
    assert task.partial_credit("1 2 3 4", "1 2 3") == pytest.approx(3 / 4)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyMoELM(ModelConfig(width=32, heads=2, top_k=2, expert_hidden=32))


def test_checkpoint_roundtrip_and_generation(model, tmp_path):
    save_checkpoint(model, tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temp dirs left behind
    policy = load_policy(tmp_path / "ck")
    prompts = [p["prompt"] for p in task.problems("validation", 5)]
    sampled = policy.generate_text(prompts, max_new_tokens=7, seed=3)
    assert sampled == policy.generate_text(prompts, max_new_tokens=7, seed=3)
    assert sampled != policy.generate_text(prompts, max_new_tokens=7, seed=4)
    greedy = policy.generate_text(prompts, temperature=0.0, max_new_tokens=7, seed=0)
    assert greedy == policy.generate_text(prompts, temperature=0.0, max_new_tokens=7, seed=99)
    original = generate(model, torch.tensor([encode_prompt(p) for p in prompts]), 7,
                        temperature=0.0, top_p=1.0, generator=None).tokens[:, 8:].tolist()
    assert [decode_response(t) for t in original] == greedy  # the loaded weights are the saved ones
    assert all(len(text.split()) <= 7 for text in sampled)
    save_checkpoint(model, tmp_path / "ck")  # overwriting an existing checkpoint is atomic too
    assert load_policy(tmp_path / "ck").generate_text(prompts, max_new_tokens=7, seed=3) == sampled


def test_load_policy_errors_name_the_path(model, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_policy(tmp_path / "nowhere")
    save_checkpoint(model, tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt checkpoint file .*model.safetensors"):
        load_policy(tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_policy(tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text("{")
    with pytest.raises(ValueError, match="corrupt checkpoint config"):
        load_policy(tmp_path / "ck")


def test_kv_cache_records_the_routing_and_distribution_of_a_full_forward(model):
    prompts = torch.tensor([encode_prompt(p["prompt"]) for p in task.problems("train", 16)])
    samples = generate(model, prompts, 7, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(0))
    full = model(samples.tokens[:, :-1])
    assert torch.equal(full.routing, samples.routing)
    torch.testing.assert_close(full.logits[:, 7:].log_softmax(-1), samples.logp_full, atol=1e-5, rtol=0)


def test_replay_forces_the_recorded_experts_and_differs_without_it(model):
    """R3: a bf16 engine copy routes some tokens differently; replay makes the fp32 forward use its experts."""
    engine = TinyMoELM(model.config).to(torch.bfloat16)
    engine.load_state_dict(model.state_dict())
    prompts = torch.tensor([encode_prompt(p["prompt"]) for p in task.problems("train", 64)])
    samples = generate(engine, prompts, 7, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(0))
    inputs = samples.tokens[:, :-1]
    own = model(inputs)
    replayed = model(inputs, replay=samples.routing)
    assert torch.equal(replayed.routing, samples.routing)
    assert torch.equal(replayed.own_routing, own.routing)
    assert (own.routing != samples.routing).any()  # bf16 vs fp32 flips some near-tied routers


def test_engine_params_presets_and_errors():
    assert resolve_engine_params({"preset": "demo", "lr": 1e-3})["lr"] == 1e-3
    assert resolve_engine_params(None)["preset"] == "demo"
    assert resolve_engine_params({"preset": "llm-regime"})["preset"] == "llm-regime"
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lrr'\]"):
        resolve_engine_params({"lrr": 1})
    with pytest.raises(ValueError, match="preset"):
        resolve_engine_params({"preset": "huge"})
    with pytest.raises(ValueError, match="reward"):
        resolve_engine_params({"reward": "bonus"})
    with pytest.raises(ValueError, match="top_k"):
        resolve_engine_params({"top_k": 5})
    json.dumps(resolve_engine_params({}))  # the resolved params are plain JSON


@pytest.mark.parametrize("top_k", [1, 2])
def test_moe_output_is_each_tokens_gated_sum_of_its_experts(top_k):
    """The grouped MoE (one block of rows per expert) against the definition, token by token:
    out[r] = sum_k gate[r, k] * expert_{chosen[r, k]}(x[r]); and the balance loss only when asked for."""
    torch.manual_seed(0)
    moe = TinyMoELM(ModelConfig(top_k=top_k, experts=4)).blocks[0].moe
    x = torch.randn(3, 5, moe.w1.shape[1], generator=torch.Generator().manual_seed(0))
    out, chosen, own, balance = moe(x, None)
    assert balance is None and torch.equal(chosen, own)
    logits = moe.router(x.reshape(-1, x.shape[-1]))
    for r, (row, experts) in enumerate(zip(x.reshape(-1, x.shape[-1]), chosen.reshape(-1, top_k))):
        gates = logits[r].softmax(-1)[experts] if top_k == 1 else logits[r][experts].softmax(-1)
        expected = sum(g * (torch.nn.functional.gelu(row @ moe.w1[e] + moe.b1[e]) @ moe.w2[e] + moe.b2[e])
                       for g, e in zip(gates, experts.tolist()))
        torch.testing.assert_close(out.reshape(-1, x.shape[-1])[r], expected)
    assert moe(x, None, balance=True)[3].ndim == 0
