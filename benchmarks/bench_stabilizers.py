"""SAT vs GRPO: forward + backward time of the loss on CPU, at 1M and 8M tokens.

    .venv/bin/python -m benchmarks.bench_stabilizers [--tokens 1000000 8000000] [--repeats 9] [--device cuda]

Both losses run through the public entry point (get(name)(batch), input validation included) on
the same batch, interleaved in the same process, so the printed ratio SAT / GRPO is measured
under the same machine load. Target (issue 2): SAT <= 1.10x GRPO. Timings on a shared machine are
noisy: each call is timed in CPU time of this process (time.process_time: other processes' load
does not count, page faults do) and the minimum and the median over the repeats are printed.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from stabilizers import PolicyBatch, get

RESPONSE_LENGTH = 1000


def make_batch(n_tokens: int, seed: int = 0, device: str = "cpu") -> PolicyBatch:
    """A batch shaped like an LLM's: mean |d| ~ 0.01 with a heavy tail, 10% padding, group advantages."""
    generator = torch.Generator().manual_seed(seed)
    shape = (n_tokens // RESPONSE_LENGTH, RESPONSE_LENGTH)
    rollout_logp = -torch.rand(shape, generator=generator) * 3
    d = 0.01 * torch.randn(shape, generator=generator) ** 3
    logp = (rollout_logp + d).requires_grad_(True)
    advantages = torch.randn(shape[0], 1, generator=generator).expand(shape).contiguous()
    mask = (torch.rand(shape, generator=generator) > 0.1).float()
    logp = logp.detach().to(device).requires_grad_(True)
    return PolicyBatch(logp=logp, old_logp=logp.detach().clone(), rollout_logp=rollout_logp.to(device),
                       advantages=advantages.to(device), mask=mask.to(device))


def time_loss(name: str, batch: PolicyBatch) -> float:
    """CPU: CPU time of this process. CUDA: wall time between synchronizations."""
    loss_fn = get(name)
    cuda = batch.logp.is_cuda
    clock = time.perf_counter if cuda else time.process_time
    if cuda:
        torch.cuda.synchronize()
    start = clock()
    loss = loss_fn(batch).loss
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    elapsed = clock() - start
    batch.logp.grad = None
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1_000_000, 8_000_000])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu (the target) or cuda")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = "CPU seconds of this process" if args.device == "cpu" else "wall seconds, synchronized"
    print(f"torch {torch.__version__}, {args.device}, {args.threads} thread(s), {args.repeats} repeats, {clock}")
    print(f"{'tokens':>10} {'grpo min':>9} {'sat min':>9} {'ratio(min)':>10} {'grpo med':>9} {'sat med':>9} {'ratio(med)':>10}")
    for n_tokens in args.tokens:
        batch = make_batch(n_tokens, device=args.device)
        time_loss("grpo", batch), time_loss("sat_grpo", batch)  # warm-up
        grpo, sat = [], []
        for _ in range(args.repeats):  # interleaved, so load changes hit both alike
            grpo.append(time_loss("grpo", batch))
            sat.append(time_loss("sat_grpo", batch))
        row = []
        for stat in (min, statistics.median):
            g, s = stat(grpo), stat(sat)
            row.append(f"{g:>9.4f} {s:>9.4f} {s / g:>9.2f}x")
        print(f"{n_tokens:>10} " + " ".join(row))


if __name__ == "__main__":
    main()
