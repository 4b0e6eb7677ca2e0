"""The tiny engine's per-step op reductions (issue 35) compute the bits the per-op code computed.

Each reference below is the code the change replaced (the commit before it), kept here to hold the
new code to it bit for bit: the MoE's experts through unbind views instead of a select per expert
and weight (forward and gradients), the emulated bf16 MoE's elementwise ops on all experts' rows at
once, the one finiteness check for all weights, and the step's numbers read in one transfer; and
(issue 48) the recompute whose first minibatch's forward the update takes instead of repeating it.
"""
import hashlib

import pytest
import torch
import torch.nn.functional as F

from engines.tiny.batch import Recomputed, all_finite, as_floats, clip_grad_norm
from engines.tiny.model import ModelConfig, MoE
from engines.tiny.rollout_bf16 import _moe, bf16
from engines.tiny.trainer import Trainer
from engines.train import run
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _select_per_expert(moe: MoE, flat: torch.Tensor, chosen: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """MoE.forward's expert computation before the change: moe.w1[expert] etc., one select each."""
    experts = chosen.reshape(-1)
    order = experts.argsort(stable=True)
    tokens = order // moe.top_k
    blocks = flat[tokens].split(torch.bincount(experts, minlength=moe.w1.shape[0]).tolist())
    outputs = [F.gelu(rows @ moe.w1[e] + moe.b1[e]) @ moe.w2[e] + moe.b2[e] for e, rows in enumerate(blocks)]
    return torch.zeros_like(flat).index_add_(0, tokens, gates.reshape(-1)[order, None] * torch.cat(outputs))


def _emulated_per_expert(moe: MoE, x: torch.Tensor):
    """rollout_bf16._moe before the change: every op and its rounding per expert block."""
    b, t, w = x.shape
    flat = x.reshape(-1, w)
    logits = bf16(moe.router(flat))
    chosen = logits.topk(moe.top_k, dim=-1).indices
    if moe.top_k == 1:
        gates = bf16(logits.softmax(-1)).gather(-1, chosen)
    else:
        gates = bf16(logits.gather(-1, chosen).softmax(-1))
    experts = chosen.reshape(-1)
    order = experts.argsort(stable=True)
    tokens = order // moe.top_k
    blocks = flat[tokens].split(torch.bincount(experts, minlength=moe.w1.shape[0]).tolist())
    outputs = []
    for expert, rows in enumerate(blocks):
        hidden = bf16(F.gelu(bf16(bf16(rows @ moe.w1[expert]) + moe.b1[expert])))
        outputs.append(bf16(bf16(hidden @ moe.w2[expert]) + moe.b2[expert]))
    weighted = bf16(gates.reshape(-1)[order, None] * torch.cat(outputs))
    out = bf16(torch.zeros_like(flat).index_add_(0, tokens, weighted))
    return out.view(b, t, w), chosen.view(b, t, moe.top_k)


def _moe_and_input(top_k: int, tokens: int, seed: int, bf16_values: bool = False):
    torch.manual_seed(seed)
    moe = MoE(ModelConfig(top_k=top_k))
    with torch.no_grad():
        for p in moe.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # nonzero biases
            if bf16_values:
                p.copy_(bf16(p))
    x = torch.randn(tokens // 8, 8, 64) if tokens >= 8 else torch.randn(tokens, 1, 64)
    return moe, bf16(x) if bf16_values else x


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("tokens", [1, 6, 128, 768])
def test_unbind_experts_give_the_select_per_expert_outputs_and_gradients(top_k, tokens):
    moe, x = _moe_and_input(top_k, tokens, seed=tokens + top_k)
    x.requires_grad_()
    out, chosen, _, _ = moe(x, None)
    grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
                                [x, *moe.parameters()])
    flat = x.reshape(-1, 64)
    logits = moe.router(flat)
    gates = logits.softmax(-1).gather(-1, chosen.reshape(-1, top_k)) if top_k == 1 else \
        logits.gather(-1, chosen.reshape(-1, top_k)).softmax(-1)
    reference = _select_per_expert(moe, flat, chosen.reshape(-1, top_k), gates).view_as(out)
    reference_grads = torch.autograd.grad((reference * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
                                          [x, *moe.parameters()])
    assert _same_bits(out.detach(), reference.detach())
    assert all(_same_bits(a, b) for a, b in zip(grads, reference_grads))


def test_an_expert_without_tokens_keeps_a_zero_gradient():
    moe, x = _moe_and_input(1, 6, seed=3)
    replay = torch.zeros(x.shape[0], x.shape[1], 1, dtype=torch.long)  # every token to expert 0
    out, _, _, _ = moe(x, replay)
    out.sum().backward()
    assert torch.all(moe.w1.grad[1:] == 0) and torch.all(moe.b2.grad[1:] == 0) and moe.w1.grad[0].abs().sum() > 0


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("tokens", [1, 6, 128, 768])
def test_emulated_moe_on_all_rows_at_once_gives_the_per_expert_bits(top_k, tokens):
    moe, x = _moe_and_input(top_k, tokens, seed=7 * tokens + top_k, bf16_values=True)
    with torch.no_grad():
        out, chosen = _moe(moe, x)
        reference, reference_chosen = _emulated_per_expert(moe, x)
    assert torch.equal(chosen, reference_chosen)
    assert _same_bits(out, reference)


def test_all_finite_finds_a_nan_or_inf_in_any_tensor():
    tensors = [torch.randn(4, 8), torch.randn(16), torch.randn(2, 3, 5)]
    assert all_finite(tensors)
    for bad in (float("nan"), float("inf"), -float("inf")):
        for index in range(len(tensors)):
            broken = [t.clone() for t in tensors]
            broken[index].view(-1)[-1] = bad
            assert not all_finite(broken)


def test_as_floats_reads_each_value_as_float_does():
    generator = torch.Generator().manual_seed(0)
    lists = {"loss": [torch.randn((), generator=generator) for _ in range(3)], "empty": [],
             "mixed": [torch.tensor(1 / 3, dtype=torch.float64), torch.tensor(0.1), torch.tensor(2.5, dtype=torch.bfloat16)]}
    floats = as_floats(lists)
    assert list(floats) == list(lists)
    assert floats == {key: [float(v) for v in values] for key, values in lists.items()}
    assert floats["mixed"][1] != 0.1 and floats["mixed"][1] == float(torch.tensor(0.1))  # the float32 value, exactly
    assert as_floats({}) == {} and as_floats({"a": []}) == {"a": []}


@pytest.mark.parametrize("max_norm", [None, 1e-3, 1, 1e6])
def test_clip_grad_norm_is_torchs_bit_for_bit(max_norm):
    generator = torch.Generator().manual_seed(5)
    shapes = [(4, 64, 128), (4, 128), (13, 64), (64,), (2,)]
    ours = [torch.zeros(shape, requires_grad=True) for shape in shapes]
    theirs = [torch.zeros(shape, requires_grad=True) for shape in shapes]
    for a, b in zip(ours, theirs):
        a.grad = torch.randn(a.shape, generator=generator) * 3
        b.grad = a.grad.clone()
    ours[3].grad = None  # a parameter without a gradient is left out, as torch does
    theirs[3].grad = None
    total = clip_grad_norm(ours, max_norm)
    reference = torch.nn.utils.clip_grad_norm_(theirs, float("inf") if max_norm is None else max_norm)
    assert _same_bits(total, reference)
    assert all(_same_bits(a.grad, b.grad) for a, b in zip(ours, theirs) if a.grad is not None)


def _recompute_in_one_forward(trainer: Trainer, batch) -> Recomputed:
    """Trainer.recompute before issue 48: one no-grad forward over the whole batch; the update then made
    its first minibatch's forward anew (here first_logits, made as the update made it)."""
    temperature = trainer.params["temperature"]
    plen = batch.tokens.shape[1] - batch.mask.shape[1]
    inputs, response = batch.tokens[:, :-1], batch.tokens[:, plen:]
    replay_mode = trainer.recipe.replay
    with torch.no_grad():
        out = trainer.model(inputs, replay=batch.routing if replay_mode == "r3" else None)
        replay = {"r3": batch.routing, "r2": out.routing, None: None}[replay_mode]
        logp_full = (out.logits[:, plen - 1:] / temperature).log_softmax(-1)
        old_logp = logp_full.gather(-1, response[..., None])[..., 0]
        ref_logp = None
        if trainer.params["kl_coef"] > 0:
            ref_logits = trainer.base(inputs, replay=replay).logits[:, plen - 1:] / temperature
            ref_logp = ref_logits.log_softmax(-1).gather(-1, response[..., None])[..., 0]
    first = trainer.minibatches(inputs.shape[0])[0]
    first_logits = trainer.model(inputs[first], replay=None if replay is None else replay[first]).logits
    return Recomputed(plen=plen, inputs=inputs, response=response, replay=replay,
                      logmu=batch.logmu_full.gather(-1, response[..., None])[..., 0], logp_full=logp_full,
                      old_logp=old_logp, ref_logp=ref_logp, routing=out.routing, own_routing=out.own_routing,
                      first_logits=first_logits)


R2 = {"grpo_r2": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}, "routing_replay": "r2"}}


@pytest.mark.parametrize(("recipe", "params"), [
    ("grpo", {}), ("sat_gspo", {"rollout_dtype": "bfloat16_emulated"}),
    ("grpo_r3", {"kl_coef": 0.05, "vcpo_ess_lr": True, "max_grad_norm": 1.0}), ("grpo_r2", {"minibatches": 4})])
def test_the_update_taking_the_recomputes_first_forward_trains_the_same_bits(base, tmp_path, monkeypatch,
                                                                             recipe, params):
    cfg = config(base, recipe=recipe, lag=2, steps=4, eval_every=2, extra_recipes=R2, **params)
    assert run(cfg, tmp_path / "new") == "completed"
    monkeypatch.setattr(Trainer, "recompute", _recompute_in_one_forward)
    assert run(cfg, tmp_path / "old") == "completed"
    tensors = {side: {str(p.relative_to(tmp_path / side)): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted((tmp_path / side).rglob("*.safetensors"))} for side in ("new", "old")}
    assert len(tensors["new"]) == 3 and tensors["new"] == tensors["old"]  # checkpoints 2, 4 and the resume state
    assert untimed_rows(tmp_path / "new" / "train" / "metrics.jsonl") == untimed_rows(
        tmp_path / "old" / "train" / "metrics.jsonl")
