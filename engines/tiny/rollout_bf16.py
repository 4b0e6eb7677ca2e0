"""A bf16 rollout engine's arithmetic in float32: ``rollout_dtype: bfloat16_emulated``.

A CPU without AVX512-BF16 (most laptops: AVX2 only) has no fast bf16 matmul: torch falls back to a
generic gemm 4-27x slower than float32, and the bf16 rollout was ~55% of a trainer step there (issue
35). This model computes what the bf16 model computes, in float32 with bf16 rounding where a bf16
engine rounds: its weights hold bf16 values (rounded to nearest even at broadcast, as a cast to bf16
does), and every op's output is rounded to bf16, as torch's bf16 CPU kernels round theirs (they
compute in float32, their "opmath" type, and store bf16): embeddings' sum, each LayerNorm, each
linear layer (once, after its bias, as the fused addmm does), the residual adds, the router's
softmax, each expert's matmuls, bias adds and GELU, the gated sum. Attention follows the CPU flash
kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp, one block at these lengths): scores
q.k^T accumulated in float32 and scaled, exp(score - row max) in float32 and its row sum taken
before rounding, the exponentials rounded to bf16 for the product with V (accumulated in float32),
the result times 1 / sum rounded to bf16. What can differ from the bf16 engine is float32
accumulation order and the kernels' exp approximation: rare one-ulp differences of a bf16 value,
so the rollouts differ token by token but not in distribution; benchmarks/bench_rollout_mismatch.py
measures |d|, d_impl and the full-vocabulary TV of both on identical weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import Attention, ForwardOutput, KVCache, MoE, TinyMoELM


def bf16(x: torch.Tensor) -> torch.Tensor:
    """x rounded to the nearest bf16 value (ties to even, as a cast to bf16), kept in float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def _attention(attn: Attention, x: torch.Tensor, cache: KVCache | None, layer: int) -> torch.Tensor:
    b, t, w = x.shape
    q, k, v = bf16(attn.qkv(x)).view(b, t, 3, attn.heads, w // attn.heads).permute(2, 0, 3, 1, 4)
    causal = (cache is None or cache.length == 0) and t > 1
    if cache is not None:
        k, v = cache.extend(layer, k, v)
    scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # the kernel's float32 scale: 1/sqrt(head width)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    y = bf16((bf16(weights) @ v) * weights.sum(-1, keepdim=True).reciprocal())
    return bf16(attn.out(y.transpose(1, 2).reshape(b, t, w)))


def _moe(moe: MoE, x: torch.Tensor):
    b, t, w = x.shape
    flat = x.reshape(-1, w)
    logits = bf16(moe.router(flat))
    chosen = logits.topk(moe.top_k, dim=-1).indices
    if moe.top_k == 1:
        gates = bf16(logits.softmax(-1)).gather(-1, chosen)
    else:
        gates = bf16(logits.gather(-1, chosen).softmax(-1))
    # as MoE.forward: the (token, slot) pairs grouped by expert, one block of rows per expert. Each
    # expert's two matmuls run on its own block, as the bf16 engine calls them; the bias adds, the GELU
    # and their roundings run once on all blocks together (each expert's bias repeated over its rows):
    # elementwise, so the same values (GELU's vectorised and scalar paths differ in the last bit, and a
    # block's numel is a multiple of the vector loop's 2 x 16 floats whenever expert_hidden is a
    # multiple of 32, as in every preset: no element moves between the two paths)
    experts = chosen.reshape(-1)
    order = experts.argsort(stable=True)
    tokens = order if moe.top_k == 1 else order // moe.top_k  # one slot per token: no division
    counts = torch.bincount(experts, minlength=moe.w1.shape[0])
    by_expert = experts[order]
    if moe.grouped:  # engine version 3: one grouped matmul per weight, as MoE.forward
        ends = counts.cumsum(0).to(torch.int32)
        first = F.grouped_mm(flat[tokens], moe.w1, offs=ends)
    else:
        sizes = counts.tolist()
        first = torch.cat([rows @ w1 for rows, w1 in zip(flat[tokens].split(sizes), moe.w1.unbind())])
    hidden = bf16(F.gelu(bf16(bf16(first) + moe.b1[by_expert])))
    second = F.grouped_mm(hidden, moe.w2, offs=ends) if moe.grouped else \
        torch.cat([rows @ w2 for rows, w2 in zip(hidden.split(sizes), moe.w2.unbind())])
    expert_out = bf16(bf16(second) + moe.b2[by_expert])
    weighted = bf16(gates.reshape(-1)[order, None] * expert_out)
    out = bf16(torch.zeros_like(flat).index_add_(0, tokens, weighted))
    return out.view(b, t, w), chosen.view(b, t, moe.top_k)


class EmulatedBF16LM(TinyMoELM):
    """TinyMoELM with bf16-valued float32 weights and bf16 rounding after every op (the module's
    docstring). For sampling only: no routing replay, no load-balancing loss."""

    def load_rounded(self, state: dict[str, torch.Tensor]) -> None:
        """Load trainer weights rounded to bf16, as the bf16 engine's load_state_dict casts them."""
        self.load_state_dict({name: bf16(value) for name, value in state.items()})

    def forward(self, tokens: torch.Tensor, *, cache: KVCache | None = None,
                replay: torch.Tensor | None = None, balance: bool = False) -> ForwardOutput:
        if replay is not None or balance:
            raise ValueError("the emulated bf16 model samples only: no routing replay or balance loss")
        start = 0 if cache is None else cache.length
        if start + tokens.shape[1] > self.config.max_positions:
            raise ValueError(f"sequence of {start + tokens.shape[1]} tokens exceeds max_positions "
                             f"{self.config.max_positions}")
        x = bf16(self.embed(tokens) + self.position(torch.arange(start, start + tokens.shape[1])))
        used = []
        for layer, block in enumerate(self.blocks):
            x = bf16(x + _attention(block.attn, bf16(block.ln1(x)), cache, layer))
            moe_out, chosen = _moe(block.moe, bf16(block.ln2(x)))
            x = bf16(x + moe_out)
            used.append(chosen)
        if cache is not None:
            cache.length += tokens.shape[1]
        routing = torch.stack(used, 2)
        return ForwardOutput(bf16(self.head(bf16(self.ln_f(x)))), routing, routing, None)
