"""The tiny engine's kernel choices against the ones they replace, at the model's shapes (issue 66).

    .venv/bin/python -m benchmarks.bench_kernels [--repeats 200]

One thread, CPU ms per call (min / median of --repeats, the alternatives interleaved). The MoE layer
(width 64, 4 experts top-1, hidden 128), forward without a graph and forward + backward, at 128 rows (a
decoding step), 384 (a minibatch's response positions under version 3) and 768 (a minibatch's rows x
positions under versions 1-2): the per-expert loop on host-sized blocks (versions 1-2), one F.grouped_mm
per weight (version 3), and a dense MoE (every expert on every token, two matmuls, the unchosen experts
weighted 0). Attention (4 heads of 16): torch's CPU flash kernel (every version), its math path and
softmax(q k^T) v as matmuls, at a decoding step (128 rows, 1 query, 12 keys; float32 and bfloat16) and a
trainer minibatch (64 rows, 12 positions, causal; with backward). Run it under
`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` for an AVX2-only CPU's kernels.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from engines.tiny.model import ModelConfig, MoE


def dense_moe(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    n, w = x.shape
    e, _, h = moe.w1.shape
    logits = moe.router(x)
    chosen = logits.topk(moe.top_k, -1).indices
    gates = torch.zeros_like(logits).scatter(-1, chosen, logits.softmax(-1).gather(-1, chosen))
    hidden = F.gelu(torch.addmm(moe.b1.reshape(-1), x, moe.w1.transpose(0, 1).reshape(w, e * h)))
    return torch.addmm(gates @ moe.b2, (hidden.view(n, e, h) * gates[:, :, None]).view(n, e * h), moe.w2.reshape(e * h, w))


def routed_moe(grouped: bool):
    def call(moe: MoE, x: torch.Tensor) -> torch.Tensor:
        moe.grouped = grouped
        return moe(x[None], None)[0][0]
    return call


def matmul_attention(q, k, v, causal):
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1).to(v.dtype) @ v


def math_attention(q, k, v, causal):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flash_attention(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def compare(title: str, calls: dict, repeats: int) -> None:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.process_time()
            call()
            times[name].append(1000 * (time.process_time() - start))
    print(title + ": " + ", ".join(f"{name} {min(v):.3f} / {sorted(v)[len(v) // 2]:.3f}" for name, v in times.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"CPU ms per call (min / median of {args.repeats}), one thread, {torch.backends.cpu.get_cpu_capability()}")
    moe = MoE(ModelConfig())
    kinds = {"per-expert loop": routed_moe(False), "grouped_mm": routed_moe(True), "dense": dense_moe}
    for rows in (128, 384, 768):
        x, grad = torch.randn(rows, 64, requires_grad=True), torch.randn(rows, 64)
        with torch.no_grad():
            compare(f"MoE {rows} rows, forward", {k: lambda f=f, x=x: f(moe, x) for k, f in kinds.items()}, args.repeats)
        compare(f"MoE {rows} rows, forward + backward",
                {k: lambda f=f, x=x, grad=grad: (f(moe, x) * grad).sum().backward() for k, f in kinds.items()}, args.repeats)
    kinds = {"flash": flash_attention, "math": math_attention, "matmuls": matmul_attention}
    for dtype in (torch.float32, torch.bfloat16):
        qkv = torch.randn(128, 1, 3, 4, 16, dtype=dtype)
        cache = torch.randn(2, 128, 4, 32, 16, dtype=dtype)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)[0], cache[0, :, :, :12], cache[1, :, :, :12]  # as the KV cache's views
        compare(f"attention, decoding step ({str(dtype)[6:]})", {name: lambda f=f, q=q, k=k, v=v: f(q, k, v, False)
                                                                   for name, f in kinds.items()}, args.repeats)
    q, k, v = torch.randn(64, 12, 3, 4, 16).permute(2, 0, 3, 1, 4).detach().requires_grad_().unbind()
    compare("attention, minibatch forward + backward (float32, causal)",
            {name: lambda f=f: f(q, k, v, True).sum().backward() for name, f in kinds.items()}, args.repeats)


if __name__ == "__main__":
    main()
