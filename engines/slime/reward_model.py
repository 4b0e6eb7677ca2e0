"""A model of slime's rule-based rewards (slime/rollout/rm_hub at the pinned commit) for the dry run,
where slime is not importable: the part of a response each scorer reads and the values it returns.

- ``dapo`` (math_dapo_utils.compute_score): the last line ``Answer: ...`` in the response's last 300
  characters, normalised, against the integer label: {"score": 1.0 or -1.0, "acc": bool, "pred": str}.
- ``deepscaler``: the last \\boxed{} after ``</think>`` (or after the first ``###Response``), else 0;
  1 when it equals the label, else 0.
- ``math``: the last \\boxed{} anywhere in the response; 1 or 0.

It models the normalisation for the answers the prompt formats ask for (integers, written with
\\boxed{}, dollar signs, thousands commas, spaces, a short ``x =`` in front, \\text{}, a degree
sign), not all of slime's (unit words, sympy's equality of expressions). The scores slime's own
scorers give a table of such responses are engines/slime/reward_agreement.jsonl (worked out by
running slime's rm_hub at the pin on them); tests/engines/slime/test_slime_preflight.py holds this model to it.
"""
from __future__ import annotations

import re
from collections.abc import Callable

ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")  # the line the DAPO prompt asks for
DAPO_WINDOW = 300  # slime's DAPO scorer reads only the response's last 300 characters
THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d*)?")


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
    return None


def dapo_normal_form(answer: str) -> str:
    """What slime's DAPO scorer compares: the part after the last '=', without spaces, dollar signs
    and a \\boxed{} or \\text{} around it; a string of digits and commas loses its commas. A trailing
    period stays, so "34." is not "34" (slime scores it wrong)."""
    answer = answer.split("=")[-1].replace("\\$", "").replace(" ", "")
    answer = re.sub(r"\\(?:boxed|text|textbf)\{(.*)\}", r"\1", answer).replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def boxed_normal_form(answer: str) -> str:
    """What slime's deepscaler and math graders compare of a numeric answer: no \\text{} around it,
    no spaces, dollar or percent signs, \\left / \\right or degree marks, no short 'x =' in front,
    no thousands commas."""
    answer = answer.strip()
    if text := re.fullmatch(r"\\text\{(.+?)\}", answer):
        answer = text.group(1)
    for mark in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "$", "\\%", "\\!", " "):
        answer = answer.replace(mark, "")
    left, equals, right = answer.partition("=")
    if equals and "=" not in right and len(left) <= 2:
        answer = right
    return answer.replace(",", "") if THOUSANDS.fullmatch(answer) else answer


def same_boxed_answer(answer: str | None, label) -> bool:
    if answer is None:
        return False
    answer, label = boxed_normal_form(answer), boxed_normal_form(str(label))
    if answer == label:
        return True
    try:
        return float(answer) == float(label)
    except ValueError:
        return False


def dapo_score(response: str, label) -> dict:
    found = ANSWER_LINE.findall(response[-DAPO_WINDOW:])
    pred = dapo_normal_form(found[-1]) if found else "[INVALID]"
    correct = pred == str(int(float(dapo_normal_form(str(label)))))  # DAPO labels are integers
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}


def deepscaler_score(response: str, label) -> int:
    if "</think>" in response:
        solution = response.split("</think>")[-1]
    elif "###Response" in response:
        solution = response.split("###Response")[1]
    else:
        return 0
    return int(same_boxed_answer(last_boxed(solution), label))


def math_score(response: str, label) -> int:
    label = str(label)
    if "\\boxed" in label:
        label = last_boxed(label) or label
    return int(same_boxed_answer(last_boxed(response), label))


RULES = {"dapo": dapo_score, "deepscaler": deepscaler_score, "math": math_score}


def rule_reward(rm_type: str) -> Callable[[str, str], float | dict]:
    """The model of slime's reward ``rm_type``: (response, label) -> its score."""
    if rm_type not in RULES:
        raise ValueError(f"engine_params.rm_type = {rm_type!r}: the pre-flight knows no scoring rule for it; "
                         f"known: {sorted(RULES)}")
    return RULES[rm_type]
