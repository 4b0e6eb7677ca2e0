"""The `tiny` back end (eval/__init__.py): lm-eval model for embedded-engine checkpoints.

The checkpoint is loaded by the engine's own loader (safetensors weights + JSON config, no
pickle). Generation is batched: all requests with the same generation settings go through
`TinyPolicy.generate_text` in chunks of `batch_size` prompts.
"""
from __future__ import annotations

import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from lm_eval.api.model import LM

from engines.tiny.checkpoint import load_policy


def chunk_seed(seed: int, group: int, chunk: int) -> int:
    """A 32-bit seed per generation call, so a chunk's samples do not depend on other chunks'."""
    return int(np.random.SeedSequence([seed, group, chunk]).generate_state(1)[0])


def cut_at_stop(text: str, until: list[str]) -> str:
    cuts = [text.find(stop) for stop in until if stop and stop in text]
    return text[:min(cuts)] if cuts else text


class TinyCheckpointLM(LM):
    REQUIRED_FILES = ("model.safetensors", "config.json")  # what engines.tiny.checkpoint saves

    @classmethod
    def check_settings(cls, settings: dict) -> None:
        """Every setting it reads (seed, batch_size) is checked by the config schema."""

    @classmethod
    def checkpoint_problem(cls, checkpoint: Path) -> str | None:
        missing = [checkpoint / name for name in cls.REQUIRED_FILES if not (checkpoint / name).is_file()]
        return f"{missing[0]} is missing" if missing else None

    @classmethod
    @contextmanager
    def models(cls, settings: dict, checkpoints: list[Path]):
        """A model per checkpoint, loaded from its files."""
        yield lambda checkpoint: cls(checkpoint=str(checkpoint), seed=settings["seed"],
                                     batch_size=settings["batch_size"])

    def __init__(self, checkpoint: str, batch_size: int | str = 512, seed: int = 0,
                 threads: int | None = None, **_ignored) -> None:
        super().__init__()
        # The job's thread budget (OMP_NUM_THREADS, set by the workflow rule), else one thread:
        # torch's default (every core) is many times slower for these small matmuls on a shared CPU.
        torch.set_num_threads(int(threads or os.environ.get("OMP_NUM_THREADS") or 1))
        self.policy = load_policy(checkpoint)
        self.checkpoint = str(checkpoint)
        self.batch_size = int(batch_size)
        self.seed = int(seed)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        # Group requests by their generation settings (a task has one set; be general anyway).
        groups: dict[str, list[int]] = defaultdict(list)
        for index, request in enumerate(requests):
            groups[repr(sorted(request.args[1].items()))].append(index)
        out: list[str | None] = [None] * len(requests)
        for group_index, indices in enumerate(groups.values()):
            kwargs = dict(requests[indices[0]].args[1])
            sample = kwargs.get("do_sample", True)
            temperature = float(kwargs.get("temperature", 1.0)) if sample else 0.0
            until = list(kwargs.get("until") or [])
            for chunk_index, start in enumerate(range(0, len(indices), self.batch_size)):
                chunk = indices[start:start + self.batch_size]
                texts = self.policy.generate_text(
                    [requests[i].args[0] for i in chunk], temperature=temperature,
                    top_p=float(kwargs.get("top_p", 1.0)),
                    max_new_tokens=int(kwargs.get("max_gen_toks", 16)),
                    seed=chunk_seed(self.seed, group_index, chunk_index))
                for i, text in zip(chunk, texts, strict=True):
                    out[i] = cut_at_stop(text, until)
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the tiny back end only generates (generate_until tasks)")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the tiny back end only generates (generate_until tasks)")
