"""Every recipe's loss, eager and compiled: forward + backward time at 1M and 8M tokens, and the
graph breaks torch.compile would meet (torch._dynamo.explain).

    .venv/bin/python -m benchmarks.bench_stabilizers [--tokens 1000000 8000000] [--repeats 5]
        [--recipes grpo sat_grpo ...] [--device cuda] [--no-compile]

Each recipe runs through its public entry point (recipe.compute_loss) on the same batch; eager
and compiled (torch.compile(fullgraph=True), Inductor) calls are interleaved with GRPO's in the
same process, so each ratio X / GRPO is measured under the same machine load. Targets (issue 15):
SAT-GRPO / GRPO <= 1.3x eager and <= 1.5x compiled. On CPU each call is timed in CPU time of this
process (time.process_time: other processes' load does not count, page faults do); on CUDA in
wall time between synchronizations. The minimum over the repeats is printed.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch._dynamo

from benchmarks.gpu_check import sampler_for
from stabilizers import PolicyBatch, load_recipes, loss_needs

RESPONSE_LENGTH = 1000


def make_batch(n_tokens: int, seed: int = 0, device: str = "cpu", needs: tuple[str, ...] = ()) -> PolicyBatch:
    """A batch shaped like an LLM's: mean |d| ~ 0.01 with a heavy tail, 10% padding, group advantages;
    with the sampler's distribution over a small vocabulary (gpu_check.sampler_for) where a recipe ``needs`` it."""
    generator = torch.Generator().manual_seed(seed)
    shape = (n_tokens // RESPONSE_LENGTH, RESPONSE_LENGTH)
    rollout_logp = -torch.rand(shape, generator=generator) * 3
    d = 0.01 * torch.randn(shape, generator=generator) ** 3
    logp = (rollout_logp + d).to(device).requires_grad_(True)
    advantages = torch.randn(shape[0], 1, generator=generator).expand(shape).contiguous()
    mask = (torch.rand(shape, generator=generator) > 0.1).float()
    return PolicyBatch(logp=logp, old_logp=logp.detach().clone(), rollout_logp=rollout_logp.to(device),
                       advantages=advantages.to(device), mask=mask.to(device),
                       sampler=sampler_for(needs, shape, generator, device))


def time_call(loss_fn, batch: PolicyBatch) -> float:
    """CPU: CPU time of this process. CUDA: wall time between synchronizations."""
    cuda = batch.logp.is_cuda
    clock = time.perf_counter if cuda else time.process_time
    if cuda:
        torch.cuda.synchronize()
    start = clock()
    loss_fn(batch)[0].backward()
    if cuda:
        torch.cuda.synchronize()
    elapsed = clock() - start
    batch.logp.grad = None
    return elapsed


def entry_point(recipe):
    def loss_and_metrics(batch: PolicyBatch):
        out = recipe.compute_loss(batch, step_seed=1)
        return out.loss, out.metrics
    return loss_and_metrics


def graph_breaks(fn, batch: PolicyBatch) -> int:
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(batch).graph_break_count


def main() -> None:
    recipes = load_recipes()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1_000_000, 8_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--recipes", nargs="+", default=sorted(recipes), choices=sorted(recipes))
    parser.add_argument("--no-compile", action="store_true", help="eager times and graph breaks only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = "CPU seconds of this process" if args.device == "cpu" else "wall seconds, synchronized"
    print(f"torch {torch.__version__}, {args.device}, {args.threads} thread(s), min of {args.repeats}, {clock}")
    print(f"{'recipe':<14} {'tokens':>9} {'breaks':>6} {'eager':>8} {'/grpo':>6} {'compiled':>9} {'/grpo':>6}")
    names = ["grpo"] + [name for name in args.recipes if name != "grpo"]
    # every recipe compiles the same closure (entry_point) into its own graph
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * len(names))
    for n_tokens in args.tokens:
        needs = tuple(sorted({need for name in names for need in loss_needs(recipes[name].loss)}))
        batch = make_batch(n_tokens, device=args.device, needs=needs)
        eager = {name: entry_point(recipes[name]) for name in names}
        compiled = {} if args.no_compile else {
            name: torch.compile(fn, fullgraph=True, dynamic=False) for name, fn in eager.items()}
        breaks = {name: graph_breaks(fn, batch) for name, fn in eager.items()}
        for fn in [*eager.values(), *compiled.values()]:  # warm-up (and compilation)
            time_call(fn, batch)
        times = {(name, mode): [] for name in names for mode in ("eager", "compiled")}
        for _ in range(args.repeats):
            for name in names:  # interleaved, so load changes hit every recipe alike
                times[name, "eager"].append(time_call(eager[name], batch))
                if compiled:
                    times[name, "compiled"].append(time_call(compiled[name], batch))
        best = {key: min(values) for key, values in times.items() if values}
        for name in names:
            row = f"{name:<14} {n_tokens:>9} {breaks[name]:>6} {best[name, 'eager']:>8.4f} " \
                  f"{best[name, 'eager'] / best['grpo', 'eager']:>5.2f}x"
            if compiled:
                row += f" {best[name, 'compiled']:>9.4f} {best[name, 'compiled'] / best['grpo', 'compiled']:>5.2f}x"
            print(row, flush=True)


if __name__ == "__main__":
    main()
