"""Answer checking and the k-sample metrics (avg@k, pass@k, maj@k) shared by every eval task.

avg@k is the paper's "avg@8": the mean correctness over the k samples of a problem, averaged
over problems. pass@k: at least one of the k samples is correct. maj@k: the most frequent
answer among the k samples (equivalent answers counted together) is correct.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# The training format's last line (DAPO-Math-17k's prompts, slime's `dapo` reward: the rest of the
# line after the last "Answer:", any case; slime/rollout/rm_hub/math_dapo_utils.py is_correct_minerva).
_ANSWER_LINE = re.compile(r"(?i)answer\s*:\s*([^\n]+)")
# The order extract_answer tries the readers below; a change bumps the AIME task's version
# (eval/tasks/aime/aime24_avg8.yaml), which every score's eval key records.
EXTRACTION_ORDER = ("answer_line", "last_boxed", "last_number")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in text (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for pos in range(begin, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            if depth == 0:
                return text[begin:pos].strip()
            depth -= 1
    return None  # unbalanced: the answer was cut off


def answer_line(text: str) -> str | None:
    """What follows the last "Answer:" (any case) on its line, as the training reward reads it; a
    \\boxed{} on that line is unwrapped (DAPO's normalisation strips it too). None without one."""
    found = _ANSWER_LINE.findall(text)
    if not found:
        return None
    line = found[-1].strip()
    boxed = last_boxed(line)
    return boxed if boxed is not None else line


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def extract_answer(text: str) -> str | None:
    """The model's final answer, tried in EXTRACTION_ORDER: the last "Answer:" line (the format the
    prompt asks for and training rewards), else the last \\boxed{} content, else the last number.
    Where two formats disagree the Answer line wins: it is the one the model was trained to give
    (the paper's PrimeMath verifier also reads after its last "answer:" marker first)."""
    readers = {"answer_line": answer_line, "last_boxed": last_boxed, "last_number": last_number}
    for name in EXTRACTION_ORDER:
        if (answer := readers[name](text)) is not None:
            return answer
    return None


def _parsed(answer: str):
    # Imported on first use: math-verify pulls in sympy (~0.4 s), which the tiny tasks never need.
    from math_verify import parse

    # Wrapping in \boxed{} makes math-verify read the whole string as one LaTeX answer.
    return parse(f"\\boxed{{{answer}}}")


def equivalent(gold: str, answer: str | None) -> bool:
    """math-verify equivalence: 42 == 042 == 42.0 == \\frac{84}{2}."""
    if answer is None or not answer.strip():
        return False
    from math_verify import verify

    return bool(verify(_parsed(str(gold)), _parsed(answer)))


def majority(answers: Sequence[str | None], same: Callable[[str, str], bool]) -> str | None:
    """The most frequent answer, grouping answers that `same` calls equal.

    Missing answers do not vote. Ties go to the answer seen first, so the result is deterministic.
    """
    groups: list[list[str]] = []
    for answer in answers:
        if answer is None:
            continue
        for group in groups:
            if same(group[0], answer):
                group.append(answer)
                break
        else:
            groups.append([answer])
    if not groups:
        return None
    return max(groups, key=len)[0]  # max keeps the first of equally long groups


def k_sample_metrics(correct: Sequence[bool], majority_correct: bool) -> dict:
    """Per-problem metrics over k samples; lm-eval averages each over problems."""
    if not correct:
        raise ValueError("no samples to score: the task got 0 responses for a problem")
    n_correct = sum(bool(c) for c in correct)
    return {
        "avg_at_k": n_correct / len(correct),
        "pass_at_k": float(n_correct > 0),
        "maj_at_k": float(bool(majority_correct)),
        "n_correct": n_correct,
    }


def score_math_samples(responses: Sequence[str], gold: str) -> dict:
    """k sampled solutions to one math problem (AIME) against its gold answer."""
    answers = [extract_answer(r) for r in responses]
    correct = [equivalent(gold, a) for a in answers]
    voted = majority(answers, lambda a, b: equivalent(a, b))
    return k_sample_metrics(correct, voted is not None and equivalent(gold, voted))
