"""Slime micro-batches for the adapter's tests, and the stabilizer called directly on the same data."""
from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile

import torch

from engines.slime import loss as slime_loss
from harness.run import RunDir
from stabilizers import PolicyBatch, fingerprint, recipe_from_named_dict

from .slime_standin import get_log_probs_and_entropy, slime_args

VOCAB = 11  # the tokenizer's
# slime's Megatron model emits padded_vocab_size logits (the vocabulary rounded up to a multiple of
# --make-vocab-size-divisible-by x TP); the log-softmax runs over all of them, tokens stay below VOCAB
PADDED_VOCAB = 16


def make_sample_batch(seed=0, prompt_lengths=(3, 5, 2, 4, 6), response_lengths=(4, 7, 1, 5, 3)):
    """A slime micro-batch: packed logits [1, T, V] (the leaf we differentiate) and the per-sample lists."""
    g = torch.Generator().manual_seed(seed)
    totals = [p + r for p, r in zip(prompt_lengths, response_lengths)]
    logits = (2 * torch.randn(1, sum(totals), PADDED_VOCAB, generator=g)).requires_grad_()
    tokens = [torch.randint(0, VOCAB, (t,), generator=g) for t in totals]
    current = [lp.detach() for lp in get_log_probs_and_entropy(
        logits, args=slime_args(), unconcat_tokens=tokens, total_lengths=totals,
        response_lengths=list(response_lengths))[1]["log_probs"]]
    masks = []
    for r in response_lengths:
        mask = (torch.rand(r, generator=g) > 0.2).int()
        mask[0] = 1  # every response keeps an active token (see engines/slime/loss.py on normalisers)
        masks.append(mask)
    batch = {
        "unconcat_tokens": tokens, "total_lengths": totals, "response_lengths": list(response_lengths),
        "loss_masks": masks,
        # old_logp: the trainer's recompute; made to differ from the current policy so that a ratio
        # against it is not 1 (as after earlier optimizer steps on the same rollout)
        "log_probs": [lp + 0.05 * torch.randn(lp.shape, generator=g) for lp in current],
        "rollout_log_probs": [lp + 0.1 * torch.randn(lp.shape, generator=g) for lp in current],
        "advantages": [torch.full((r,), float(torch.randn((), generator=g))) for r in response_lengths],
        "ref_log_probs": [lp + 0.02 * torch.randn(lp.shape, generator=g) for lp in current],
        # slime's data iterator gives every key the loss step asks for, None where the rollout has none
        "values": None, "multimodal_train_inputs": None,
    }
    batch["returns"] = list(batch["advantages"])  # GRPO: the returns are the advantages
    return logits, batch


def padded(tensors, length):
    """[B, L] by explicit copying (independent of the adapter's pad_sequence)."""
    out = torch.zeros(len(tensors), length)
    for i, t in enumerate(tensors):
        out[i, :len(t)] = t
    return out


def direct_loss(logits, batch, recipe):
    """The stabilizer called directly on the equivalent PolicyBatch."""
    return direct_loss_of_many([(logits, batch)], recipe)


def direct_loss_of_many(micro_batches, recipe):
    """The stabilizer on one PolicyBatch holding the samples of several (logits, batch) micro-batches."""
    log_probs, keys = [], ("log_probs", "rollout_log_probs", "advantages", "loss_masks")
    lists = {key: [] for key in keys}
    for logits, batch in micro_batches:
        _, current = get_log_probs_and_entropy(
            logits, args=slime_args(), unconcat_tokens=batch["unconcat_tokens"],
            total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"])
        log_probs += current["log_probs"]
        for key in keys:
            lists[key] += list(batch[key])
    length = max(len(lp) for lp in log_probs)
    logp = torch.stack([torch.nn.functional.pad(lp, (0, length - len(lp))) for lp in log_probs])
    policy_batch = PolicyBatch(logp=logp, old_logp=padded(lists["log_probs"], length),
                               rollout_logp=padded(lists["rollout_log_probs"], length),
                               advantages=padded(lists["advantages"], length),
                               mask=padded([m.float() for m in lists["loss_masks"]], length))
    return recipe.compute_loss(policy_batch)


@functools.cache
def run_dir_for(spec_json: str) -> str:
    """A run directory whose train/fingerprint.json is the recipe's, as engines.train records it."""
    path = tempfile.mkdtemp(prefix="stalebench-slime-run-")
    atexit.register(shutil.rmtree, path, True)
    RunDir(path).write_fingerprint(fingerprint(recipe_from_named_dict(json.loads(spec_json), "test")))
    return path


def args_for(recipe, **overrides):
    """slime's args for the recipe as the launcher's flags and slime_validate_args leave them (R3 implies
    use_routing_replay, slime/utils/arguments.py 2010-2011), with a run directory holding its fingerprint."""
    spec = {"name": recipe.name, **recipe.as_dict()}
    values = dict(stalebench_recipe=spec, use_rollout_routing_replay=recipe.replay == "r3",
                  use_routing_replay=recipe.replay is not None,
                  calculate_per_token_loss=slime_loss.per_token_loss_flag(recipe), **overrides)
    values.setdefault("stalebench_run_dir", run_dir_for(json.dumps(spec, sort_keys=True)))
    return slime_args(**values)
