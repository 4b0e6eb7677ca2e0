"""GPU check: every registered stabilizer and the slime loss entry on CUDA against CPU, with syncs counted.

    python benchmarks/gpu_check.py [--tokens 262144] [--repeats 5] [--json OUT]

Needs only torch, numpy, pyyaml and safetensors besides the repository (no snakemake, lm-eval or
slime), and takes well under 5 minutes on one GPU. For each stabilizer (stabilizers.available(),
default parameters, forward + backward on one batch shaped like an LLM's) and for the slime
custom-loss entry (engines.slime.loss.recipe_loss on the stand-in micro-batches of
tests/support/slime_batches.py, every recipe slime can express), it prints the loss on CPU and CUDA,
their difference, the largest gradient difference, the number of host-device synchronisations
during the CUDA forward + backward (torch.cuda.set_sync_debug_mode("warn") warns once per sync)
and the median CUDA time of forward + backward (inputs already on the device). Without CUDA it prints the CPU columns and says that the CUDA ones are
skipped. "ok" means loss and gradients agree to 1e-4 (relative to their scale) and the CUDA forward
+ backward made no host sync (README: every loss is free of them; a sync stalls every micro-batch of a
cluster step); the exit code is 1 otherwise. Stabilizers that draw random numbers get the same seed on
both devices.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from stabilizers import PolicyBatch, SamplerDistribution, available, get, load_recipes, loss_needs

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
RESPONSE_LENGTH = 1024
SAMPLER_VOCAB = 16  # Score Centering's and ESTR's vocabulary here: the tiny engine's order of size


def make_batch(n_tokens: int, device: str, seed: int = 0, needs: tuple[str, ...] = ()) -> PolicyBatch:
    """Drawn on the CPU (identical on every device): mean |d| ~ 0.01 with a heavy tail, 10% padding;
    with the sampler's distribution (sampler_for) for a loss that ``needs`` it."""
    g = torch.Generator().manual_seed(seed)
    shape = (max(1, n_tokens // RESPONSE_LENGTH), RESPONSE_LENGTH)
    rollout_logp = -torch.rand(shape, generator=g) * 3
    logp = rollout_logp + 0.01 * torch.randn(shape, generator=g) ** 3
    old_logp = logp + 0.005 * torch.randn(shape, generator=g)
    advantages = torch.randn(shape[0], 1, generator=g).expand(shape).contiguous()
    mask = (torch.rand(shape, generator=g) > 0.1).float()
    return PolicyBatch(logp=logp.to(device).requires_grad_(True), old_logp=old_logp.to(device),
                       rollout_logp=rollout_logp.to(device), advantages=advantages.to(device), mask=mask.to(device),
                       sampler=sampler_for(needs, shape, g, device))


def sampler_for(needs: tuple[str, ...], shape: tuple[int, int], generator: torch.Generator,
                device: str) -> SamplerDistribution | None:
    """mu's and pi's log-probs over a SAMPLER_VOCAB-entry vocabulary (pi's a leaf with gradient) and mu's
    entropy, drawn after the batch's other tensors (which it leaves as they were); None for a loss that
    reads none (stabilizers.loss_needs)."""
    if not needs:
        return None
    logits = torch.randn((*shape, SAMPLER_VOCAB), generator=generator)
    logq = (logits + 0.01 * torch.randn((*shape, SAMPLER_VOCAB), generator=generator)).log_softmax(-1)
    return SamplerDistribution(logq=logq.to(device), logp=logits.log_softmax(-1).to(device).requires_grad_(True),
                               entropy=torch.special.entr(logq.exp()).sum(-1).to(device))


def count_syncs(fn):
    """fn() on CUDA with sync debugging on: (its result, where each synchronising call was made).

    A site is the innermost frame of this repository's code on the Python stack when torch warned
    ("path:line")."""
    sites = []

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            sites.append(repository_site(traceback.extract_stack()[:-1]))  # [:-1]: not this function

    with warnings.catch_warnings():
        # the switch itself, the first time, reports a sync (an H200 with torch 2.11): not fn()'s
        warnings.simplefilter("ignore")
        torch.cuda.set_sync_debug_mode("warn")
        warnings.simplefilter("always")
        warnings.showwarning = record
        try:
            result = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return result, sites


def repository_site(stack: traceback.StackSummary) -> str:
    """The innermost frame of this repository's code (not an installed package's): the line that
    synchronised, or this script's ``backward()`` line for a sync inside autograd's backward."""
    for frame in reversed(stack):
        path = Path(frame.filename).resolve()
        if path.is_file() and path.is_relative_to(ROOT) and "site-packages" not in path.parts:
            return f"{path.relative_to(ROOT)}:{frame.lineno}"
    return "outside the repository"


def cuda_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def compare(prepare, step, cuda: bool, repeats: int) -> dict:
    """``prepare(device)`` -> inputs (not counted or timed); ``step(inputs)`` -> (loss, gradient)
    after forward + backward: the part whose syncs are counted and whose time is measured."""
    loss, grad = step(prepare("cpu"))
    row = {"loss_cpu": float(loss)}
    if not cuda:
        return row
    inputs = prepare("cuda")
    torch.cuda.synchronize()
    (loss_cuda, grad_cuda), sites = count_syncs(lambda: step(inputs))
    syncs = len(sites)
    dloss = abs(float(loss_cuda) - float(loss))
    dgrad = float((grad_cuda.cpu() - grad).abs().max()) if grad.numel() else 0.0
    scale = max(float(grad.abs().max()) if grad.numel() else 0.0, 1e-12)
    row.update(loss_cuda=float(loss_cuda), dloss=dloss, dgrad=dgrad, syncs=syncs, sync_sites=sorted(set(sites)),
               ms=cuda_ms(lambda: step(inputs), repeats))
    row["verdict"] = verdict(row, scale)
    row["ok"] = row["verdict"] == "ok"
    return row


def verdict(row: dict, grad_scale: float) -> str:
    """'ok', 'DIFFERS' (loss or gradient off by more than TOLERANCE) or 'SYNCS' (a host sync)."""
    if row["dloss"] > TOLERANCE * max(1.0, abs(row["loss_cpu"])) or row["dgrad"] > TOLERANCE * grad_scale:
        return "DIFFERS"
    return "SYNCS" if row["syncs"] else "ok"


def stabilizer_check(name: str, n_tokens: int):
    def step(batch):
        batch.logp.grad = None
        loss = get(name)(batch).loss
        loss.backward()
        return loss.detach(), batch.logp.grad.detach()
    return lambda device: make_batch(n_tokens, device, needs=loss_needs(name)), step


def slime_runs():
    """(recipe name, prepare, step) for the slime loss entry, or why it cannot run here."""
    try:
        from engines.slime import loss as slime_loss
        from tests.support.slime_batches import args_for, make_sample_batch
        from tests.support.slime_standin import (
            get_log_probs_and_entropy,
            slime_args,
            sum_of_sample_mean_factory,
        )
    except ImportError as error:
        return f"slime loss entry skipped: the stand-in batch builder is not importable ({error})"
    runs = []
    for name, recipe in load_recipes().items():
        try:
            slime_loss.aggregation_of(recipe)
        except ValueError:
            continue  # a loss slime has no normaliser for: the launcher refuses it too
        if recipe.params.get("quantile_scope", "microbatch") == "global":
            continue  # needs Megatron's data-parallel group
        if loss_needs(recipe.loss):
            continue  # the sampler's distribution, which slime's pin does not carry (the config check refuses it)

        def prepare(device):
            logits, batch = make_sample_batch(seed=0)
            return logits.detach().to(device).requires_grad_(True), {
                key: None if value is None else [t.to(device) if isinstance(t, torch.Tensor) else t for t in value]
                for key, value in batch.items()}  # None: a key slime's iterator has no data for

        def step(inputs, recipe=recipe):
            logits, batch = inputs
            logits.grad = None
            args = args_for(recipe)
            _, current = get_log_probs_and_entropy(logits, args=slime_args(), unconcat_tokens=batch["unconcat_tokens"],
                                                   total_lengths=batch["total_lengths"],
                                                   response_lengths=batch["response_lengths"], with_entropy=True)
            reducer = sum_of_sample_mean_factory(batch["response_lengths"], batch["loss_masks"],
                                                 args.calculate_per_token_loss)
            slime_loss._calls = itertools.count()  # the same seed on every device
            loss, _ = slime_loss.recipe_loss(args, batch, current["log_probs"], current["entropy"], reducer, recipe)
            loss.backward()
            return loss.detach(), logits.grad.detach()
        runs.append((name, prepare, step))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=262_144, help="tokens per stabilizer batch")
    parser.add_argument("--repeats", type=int, default=5, help="timed CUDA repeats (median)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "none"
    print(f"torch {torch.__version__}, CUDA device: {device}, {args.tokens} tokens per stabilizer batch")
    if not cuda:
        print("CUDA not available: CPU columns only, CUDA columns skipped")
    rows = [("stabilizer", name, compare(*stabilizer_check(name, args.tokens), cuda, args.repeats))
            for name in available()]
    slime = slime_runs()
    if isinstance(slime, str):
        print(slime)
    else:
        rows += [("slime loss", name, compare(prepare, step, cuda, args.repeats)) for name, prepare, step in slime]
    header = f"{'kind':<11} {'name':<14} {'loss cpu':>12}"
    if cuda:
        header += f" {'loss cuda':>12} {'|dloss|':>9} {'max|dgrad|':>10} {'syncs':>5} {'cuda ms':>8}  ok"
    print(header)
    for kind, name, row in rows:
        line = f"{kind:<11} {name:<14} {row['loss_cpu']:>12.6f}"
        if cuda:
            line += (f" {row['loss_cuda']:>12.6f} {row['dloss']:>9.2e} {row['dgrad']:>10.2e} {row['syncs']:>5d} "
                     f"{row['ms']:>8.2f}  {row['verdict']}")
        print(line)
    for kind, name, row in rows:
        if row.get("sync_sites"):
            print(f"{kind} {name} synchronises at: {', '.join(row['sync_sites'])}")
    if args.json:
        args.json.write_text(json.dumps([{"kind": k, "name": n, **r} for k, n, r in rows], indent=1))
    return 0 if all(row.get("ok", True) for _, _, row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
