"""The AIME task scores the format training trains: DAPO's prompt, its "Answer:" line read first
(eval/answers.py EXTRACTION_ORDER), and an eval key that changes with the prompt."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from lm_eval.api.model import LM

from eval.answers import EXTRACTION_ORDER, equivalent, extract_answer
from eval.score import load_task, prompts_digest, score_checkpoint
from eval.tasks.aime import utils as aime
from harness.identity import eval_key
from tests.support.optional import missing
from tests.support.paths import FIXTURES, ROOT


def responses(gold: str) -> list[tuple[str, bool]]:
    """Eight hand-made responses to a problem of answer ``gold``, one format or conflict each, and
    whether each is correct under EXTRACTION_ORDER."""
    wrong = str((int(gold) + 1) % 1000)
    return [
        (f"Adding the cases gives the count.\nAnswer: {gold}", True),  # the training format
        (f"So the count is \\boxed{{{gold}}}.", True),  # a box, no Answer line
        (f"Adding up, the count is {gold}", True),  # neither: the last number
        (f"Answer: {gold}\nChecking once more: \\boxed{{{wrong}}}", True),  # the line beats a later box
        (f"So \\boxed{{{gold}}}.\nAnswer: {wrong}", False),  # ... and an earlier one
        (f"Answer: {wrong}\nThat is all, though {gold} came up too", False),  # ... and the last number
        (f"Answer: ${gold}$", True),  # LaTeX on the line, as DAPO's normalisation allows
        (f"Answer: {gold}.", False),  # a trailing full stop: wrong, as the training reward scores it
    ]


def test_the_extraction_order_is_the_one_documented():
    assert EXTRACTION_ORDER == ("answer_line", "last_boxed", "last_number")
    readme = (ROOT / "eval" / "tasks" / "aime" / "README.md").read_text()
    assert "Answer:" in readme and "then the last `\\boxed{}`" in readme


def test_the_prompt_is_the_training_prompt():
    """DAPO-Math-17k's prompt around the problem (the project's copies of its rows: the dry run's
    fixture, tests/fixtures/dapo_prompts.jsonl), word for word."""
    row = json.loads((FIXTURES / "dapo_prompts.jsonl").read_text().splitlines()[0])
    problem = "Two numbers have sum 10 and product 33. What is the sum of their squares?"
    assert aime.doc_to_text({"problem": problem}) == row["prompt"]


class FormatsLM(LM):
    """Answers problem d's r-th request with responses(gold of d)[r]."""

    def __init__(self, golds: list[str]):
        super().__init__()
        self.golds, self.seen = golds, Counter()

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for request in requests:
            repeat = self.seen[request.doc_id]
            self.seen[request.doc_id] += 1
            out.append(responses(self.golds[request.doc_id])[repeat][0])
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError


def test_every_format_on_the_shipped_aime_problems_scores_as_the_order_says():
    """The 30 AIME 2024 problems ($STALEBENCH_AIME24, as the loader test reads them), each answered
    in the eight formats of ``responses`` through lm-eval: 5 of 8 correct per problem, the majority
    (the gold, its LaTeX form counted with it) right."""
    path = os.environ.get("STALEBENCH_AIME24")
    if not path:
        missing("aime24", "STALEBENCH_AIME24 names no copy of the AIME 2024 problems")
    settings = {"k": 8, "seed": 0, "data": {"aime24": path}}
    task_dict = load_task("aime24_avg8", settings)
    golds = [doc["answer"] for doc in task_dict["tasks"]["aime24_avg8"].test_docs()]
    assert len(golds) == 30
    expected = sum(correct for _, correct in responses("1"))
    for gold in golds:  # the canned verdicts hold for every real answer, not only the first
        assert [equivalent(gold, extract_answer(text)) for text, _ in responses(gold)] == [
            correct for _, correct in responses(gold)], gold
    row = score_checkpoint(FormatsLM(golds), task_dict, "aime24_avg8", 5, settings, key="k")
    assert expected == 5 and row["per_problem"] == [5] * 30
    assert row["score"] == pytest.approx(5 / 8) and row["pass_at_k"] == 1.0 and row["maj_at_k"] == 1.0


# Rows of engines/slime/reward_agreement.jsonl (held to slime's own scores) where the eval's verdict
# differs from the training reward's (slime's `dapo`), and why; on every other row they agree.
DISAGREE = {
    9: "Answer: 34.0 -- math-verify compares values, DAPO compares strings",
    12: "the Answer line lies before the last 300 characters, which are all DAPO reads",
    16: "Answer: 1 000 -- DAPO removes spaces, math-verify does not read '1 000' as 1000",
    17: "no Answer line: the eval reads the box, DAPO scores it wrong",
    20: "no Answer line: the eval reads the last number, DAPO scores it wrong",
}


def test_the_eval_agrees_with_the_training_reward_on_its_format():
    rows = [json.loads(line) for line in (ROOT / "engines" / "slime" / "reward_agreement.jsonl").read_text().splitlines()]
    differ = {number for number, row in enumerate(rows, 1) if row["format"] == "dapo"
              and equivalent(row["label"], extract_answer(row["response"])) != (row["dapo"] == 1.0)}
    assert differ == set(DISAGREE)
    assert sum(row["format"] == "dapo" for row in rows) - len(differ) == 15  # agreeing rows


def test_a_changed_prompt_changes_the_eval_key(monkeypatch):
    """A score made under another prompt is never reused: the prompts' digest is in the eval key."""
    settings = {"k": 8, "seed": 0, "data": {"aime24": str(FIXTURES / "aime_mini.jsonl")}}
    task = load_task("aime24_avg8", settings)["tasks"]["aime24_avg8"]
    before = prompts_digest(task)
    # lm-eval imports utils.py on its own: change the PROMPT its doc_to_text formats
    template = task.config.doc_to_text.__globals__
    assert template["PROMPT"] == aime.PROMPT
    monkeypatch.setitem(template, "PROMPT", "Put your final answer in \\boxed{{}}.\n\nProblem: {problem}\n\nSolution:")
    after = prompts_digest(task)
    assert before != after
    assert eval_key("aime24_avg8", 2.0, settings, "run", before) != eval_key("aime24_avg8", 2.0, settings, "run", after)
    other_problems = load_task("aime24_avg8", {**settings, "problems": {"aime24_avg8": 2}})["tasks"]["aime24_avg8"]
    assert prompts_digest(other_problems) != after
