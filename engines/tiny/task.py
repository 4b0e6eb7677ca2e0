"""The verifiable task of the tiny engine: sort 6 digits.

A problem is six digits, e.g. prompt "3 1 4 1 5 9" -> answer "1 1 3 4 5 9". Every one of the
10^6 digit strings belongs to exactly one split, decided by a stable hash of the string
(10% validation, 10% test, 80% train), so the splits are disjoint by construction and the
generator can draw from any split with any seed without coordination.
"""
from __future__ import annotations

import hashlib
import random

DIGITS = 6
SPLITS = ("train", "validation", "test")


def split_of(digits: str) -> str:
    """The split a digit string (e.g. "314159") belongs to; stable across processes and engine versions."""
    bucket = hashlib.blake2b(digits.encode(), digest_size=2).digest()[0] % 10
    return "validation" if bucket == 0 else "test" if bucket == 1 else "train"


def problems(split: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct problems of ``split``, drawn deterministically from ``seed``.

    Each is {"id", "prompt", "answer"}; prompt and answer are space-separated digits.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    rng = random.Random(f"digit-sort/{split}/{seed}")  # str seeds are hashed with sha512: stable
    seen: set[str] = set()
    out = []
    while len(out) < n:
        digits = "".join(rng.choice("0123456789") for _ in range(DIGITS))
        if digits in seen or split_of(digits) != split:
            continue
        seen.add(digits)
        out.append({"id": f"{split}-{seed}-{len(out)}", "prompt": " ".join(digits),
                    "answer": " ".join(sorted(digits))})
    return out


def normalise(text: str) -> str:
    return " ".join(text.split())


def is_correct(response: str, answer: str) -> bool:
    """Exact match after whitespace normalisation."""
    return normalise(response) == normalise(answer)


def partial_credit(response: str, answer: str) -> float:
    """Fraction of answer positions the response gets right (a longer or shorter response loses
    the positions it misses); 1.0 exactly when ``is_correct``."""
    got, want = normalise(response).split(), normalise(answer).split()
    hits = sum(a == b for a, b in zip(got, want))
    return hits / max(len(got), len(want), 1)
