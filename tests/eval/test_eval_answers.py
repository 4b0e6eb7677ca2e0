"""Answer checking and avg@k / pass@k / maj@k, alone and through lm-eval with canned outputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import datasets
import pytest
from lm_eval.api.model import LM

from eval.answers import equivalent, extract_answer, majority, score_math_samples
from eval.score import load_task, score_checkpoint
from tests.support.optional import missing
from tests.support.paths import FIXTURES, ROOT

FIXTURE = FIXTURES / "aime_mini.jsonl"

# Canned responses per fixture problem (gold 42, 7, 100) and whether each is correct.
CANNED = [
    [("\\boxed{042}", True), ("so it is 42.0", True), ("The answer is 42", True),
     ("\\boxed{41}", False), ("I cannot tell.", False), ("\\boxed{42}", True), ("43", False),
     ("\\boxed{\\frac{84}{2}}", True)],
    [("\\boxed{3}", False), ("\\boxed{3}", False), ("\\boxed{3}", False), ("\\boxed{7}", True),
     ("7", True), ("\\boxed{5}", False), ("", False), ("\\boxed{7.5}", False)],
    [("\\boxed{10}", False)] * 8,
]
# Problem 1: 5/8 correct, majority 42 (right). Problem 2: 2/8, majority 3 (wrong). Problem 3: 0/8.
EXPECTED = {"per_problem": [5, 2, 0], "score": (5 / 8 + 2 / 8 + 0) / 3, "pass_at_k": 2 / 3, "maj_at_k": 1 / 3}


@pytest.mark.parametrize("text, answer", [
    ("so \\boxed{042}.", "042"), ("\\boxed{\\frac{1}{2}} then \\boxed{7}", "7"),
    ("x = \\boxed{\\frac{84}{2}}", "\\frac{84}{2}"), ("first 3, finally 42.0", "42.0"),
    ("no digits", None), ("cut off \\boxed{4", "4"),
    # the training format's line first, whatever else the response holds
    ("so 12\nAnswer: 34", "34"), ("answer:  \\boxed{34} \nthen 7", "34"), ("Answer: 12\nAnswer: 34", "34"),
    ("\\boxed{12}\nAnswer: 34", "34"), ("Answer: 34\nso \\boxed{12}", "34"), ("Answer: 34\n\nthen 99", "34"),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_equivalence_follows_math_verify():
    assert equivalent("42", "042") and equivalent("42", "42.0") and equivalent("42", "\\frac{84}{2}")
    assert not equivalent("42", "41.99") and not equivalent("42", None) and not equivalent("42", " ")


def test_majority_groups_equivalent_answers_and_breaks_ties_by_first_seen():
    same = lambda a, b: equivalent(a, b)  # noqa: E731
    assert majority(["3", "042", "3", "42.0", "42", None], same) == "042"
    assert majority(["5", "6", "6", "5"], same) == "5"
    assert majority([None, None], same) is None


@pytest.mark.parametrize("index", range(3))
def test_score_math_samples_per_problem(index):
    responses = [r for r, _ in CANNED[index]]
    got = score_math_samples(responses, ["42", "7", "100"][index])
    assert got["n_correct"] == sum(c for _, c in CANNED[index]) == EXPECTED["per_problem"][index]
    assert got["avg_at_k"] == got["n_correct"] / 8
    assert got["maj_at_k"] == [1.0, 0.0, 0.0][index]


class CannedLM(LM):
    """Answers sample r of problem d with CANNED[d][r]; lm-eval repeats a request k times in a row."""

    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for request in requests:
            repeat = self.seen[request.doc_id]
            self.seen[request.doc_id] += 1
            out.append(CANNED[request.doc_id][repeat][0])
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError


def test_canned_outputs_through_lm_eval_give_exact_metrics():
    settings = {"k": 8, "seed": 3, "data": {"aime24": str(FIXTURE)}}
    task_dict = load_task("aime24_avg8", settings)
    task = task_dict["tasks"]["aime24_avg8"]
    assert task.config.repeats == 8 and task.config.generation_kwargs["temperature"] == 1.0
    lm = CannedLM()
    row = score_checkpoint(lm, task_dict, "aime24_avg8", 5, {**settings, "k": 8, "seed": 3}, key="an-eval-key")
    assert row["eval_key"] == "an-eval-key" and row["step"] == 5
    assert sorted(lm.seen.values()) == [8, 8, 8]  # all k samples of every problem were requested
    assert row["per_problem"] == EXPECTED["per_problem"] and row["n_problems"] == 3
    assert row["score"] == pytest.approx(EXPECTED["score"], abs=1e-12)
    assert row["pass_at_k"] == pytest.approx(EXPECTED["pass_at_k"], abs=1e-12)
    assert row["maj_at_k"] == pytest.approx(EXPECTED["maj_at_k"], abs=1e-12)
    assert (row["step"], row["k"], row["seed"], row["task"], row["task_version"]) == (5, 8, 3, "aime24_avg8", 2.0)


def test_both_published_layouts_load_through_the_local_path_loader(scratch):
    """The Hub's columns (ID, Problem, Solution, Answer; integer answers) as parquet, and DAPO's
    export (index, Problem, Answer) as JSONL, written here from the fixture's problems."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    datasets.Dataset.from_dict({"ID": [f"2024-I-{i}" for i in range(1, 4)], "Problem": [r["Problem"] for r in rows],
                                "Solution": ["..."] * 3, "Answer": [int(r["Answer"]) for r in rows]}
                               ).to_parquet(scratch / "hub.parquet")
    (scratch / "dapo.jsonl").write_text("".join(
        json.dumps({"index": i, "Problem": r["Problem"], "Answer": r["Answer"]}) + "\n" for i, r in enumerate(rows)))
    for path in (scratch / "hub.parquet", scratch / "dapo.jsonl"):
        task = load_task("aime24_avg8", {"data": {"aime24": str(path)}})["tasks"]["aime24_avg8"]
        docs = list(task.test_docs())
        assert [(d["problem"], d["answer"]) for d in docs] == [("Compute $6 \\cdot 7$.", "42"), (
            "Find the positive integer $n$ with $n^2 = 49$.", "7"), (
            "How many positive integers at most $100$ are there?", "100")], path.name
        assert "\n\nCompute $6 \\cdot 7$.\n\nRemember to put your answer" in task.doc_to_text(docs[0])


def test_the_published_aime24_file_loads_through_the_local_path_loader():
    """$STALEBENCH_AIME24: a copy of the 30 AIME 2024 problems (the Hub's Maxwell-Jia/AIME_2024, or
    DAPO's export of it); CI downloads one (.ci/run)."""
    path = os.environ.get("STALEBENCH_AIME24")
    if not path:
        missing("aime24", "STALEBENCH_AIME24 names no copy of the AIME 2024 problems")
    task = load_task("aime24_avg8", {"data": {"aime24": path}})["tasks"]["aime24_avg8"]
    docs = list(task.test_docs())
    # AIME 2024 had two papers of 15 problems, every answer an integer 0-999
    assert len(docs) == 30 and len({d["problem"] for d in docs}) == 30
    assert all(d["answer"].strip().isdigit() and 0 <= int(d["answer"]) <= 999 for d in docs)
    assert "Answer:" in task.doc_to_text(docs[0]) and docs[0]["problem"] in task.doc_to_text(docs[0])


def test_problems_setting_takes_a_prefix():
    task = load_task("aime24_avg8", {"data": {"aime24": str(FIXTURE)}, "problems": {"aime24_avg8": 2}})
    docs = list(task["tasks"]["aime24_avg8"].test_docs())
    assert [d["answer"] for d in docs] == ["42", "7"]


@pytest.mark.slow  # a process importing the eval tasks
def test_the_tiny_tasks_do_not_import_math_verify():
    """math-verify (sympy) is imported on first use: scoring a tiny task never pays for it."""
    code = "import sys, eval.tasks.tiny.utils; print('math_verify' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT)
    assert result.stdout.strip() == "False"
