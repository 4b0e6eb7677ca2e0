"""Data and scoring hooks of tiny_val / tiny_test: the embedded engine's deterministic problems."""
from __future__ import annotations

import datasets

from engines.tiny import task as tiny_task
from eval.answers import k_sample_metrics, majority

DEFAULT_N_PROBLEMS = 256


def _load(split: str, task_name: str, problems: dict | None, problem_seed: int) -> datasets.DatasetDict:
    # problems: the eval section's optional {task name: number of problems}.
    n = int((problems or {}).get(task_name, DEFAULT_N_PROBLEMS))
    if n < 1:
        raise ValueError(f"eval.problems.{task_name} must be >= 1, got {n}")
    rows = tiny_task.problems(split, n, seed=problem_seed)
    if not rows:
        raise ValueError(f"{task_name}: engines.tiny.task.problems({split!r}, {n}) returned 0 problems")
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict(
        {key: [str(row[key]) for row in rows] for key in ("id", "prompt", "answer")})})


def load_val(problems: dict | None = None, problem_seed: int = 0, **_metadata) -> datasets.DatasetDict:
    return _load("validation", "tiny_val", problems, problem_seed)


def load_test(problems: dict | None = None, problem_seed: int = 0, **_metadata) -> datasets.DatasetDict:
    return _load("test", "tiny_test", problems, problem_seed)


def process_results(doc: dict, results: list) -> dict:
    responses = results[0]  # take_first_k: results == [[r1, ..., rk]]
    correct = [bool(tiny_task.is_correct(r, doc["answer"])) for r in responses]
    voted = majority([tiny_task.normalise(r) for r in responses], lambda a, b: a == b)
    return k_sample_metrics(correct, voted is not None and bool(tiny_task.is_correct(voted, doc["answer"])))
