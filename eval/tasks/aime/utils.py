"""Data and scoring hooks of the aime24_avg8 task (referenced by aime24_avg8.yaml)."""
from __future__ import annotations

from pathlib import Path

import datasets

from eval.answers import score_math_samples

HUB_DATASET = "Maxwell-Jia/AIME_2024"
# The training format: DAPO-Math-17k's prompt, word for word (the preset trains on its prompts, and
# slime's `dapo` reward reads the last "Answer:" line), so a checkpoint is scored on the format it
# was trained to answer in. eval/answers.py extract_answer reads that line first.
PROMPT = ("Solve the following math problem step by step. The last line of your response should be of "
          "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
          "{problem}\n\nRemember to put your answer on its own line after \"Answer:\".")
# Column spellings seen in the wild: the Hub set (ID, Problem, Answer), DAPO's export (index, ...).
_COLUMNS = {"id": ("ID", "id", "index"), "problem": ("Problem", "problem"),
            "answer": ("Answer", "answer")}


def _normalise(rows: datasets.Dataset, source: str) -> datasets.Dataset:
    picked = {}
    for name, spellings in _COLUMNS.items():
        column = next((c for c in spellings if c in rows.column_names), None)
        if column is None:
            raise ValueError(f"{source}: no {name!r} column (looked for {list(spellings)}; "
                             f"found {rows.column_names})")
        picked[name] = [str(v) for v in rows[column]]
    if not picked["id"]:
        raise ValueError(f"{source}: the dataset is empty (0 problems)")
    return datasets.Dataset.from_dict(picked)


def load_dataset(data: dict | None = None, problems: dict | None = None, **_metadata) -> datasets.DatasetDict:
    """The AIME 2024 problems: from data["aime24"] (a local JSONL or parquet file) when given,
    else from the Hub (Maxwell-Jia/AIME_2024); the first problems["aime24_avg8"] of them when
    given. Both come from the config's eval section through lm-eval's task metadata."""
    path = (data or {}).get("aime24")
    if path:
        path = Path(path).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"aime24 data file not found: {path} (eval.data.aime24)")
        kind = "parquet" if path.suffix == ".parquet" else "json"
        if path.stat().st_size == 0:
            raise ValueError(f"{path}: the dataset is empty (0 problems)")
        rows = datasets.load_dataset(kind, data_files=str(path), split="train")
        source = str(path)
    else:
        try:
            rows = datasets.load_dataset(HUB_DATASET, split="train")
        except ConnectionError as error:  # offline (eval.score defaults HF_*_OFFLINE=1) and not cached
            raise ConnectionError(
                f"could not load {HUB_DATASET} from the Hub or its cache ({error}); set eval.data.aime24 "
                "to a local JSONL/parquet file, or run once with HF_DATASETS_OFFLINE=0 HF_HUB_OFFLINE=0 "
                "to download it") from error
        source = HUB_DATASET
    rows = _normalise(rows, source)
    n = (problems or {}).get("aime24_avg8")
    return datasets.DatasetDict({"test": rows.select(range(min(int(n), len(rows)))) if n else rows})


def doc_to_text(doc: dict) -> str:
    return PROMPT.format(problem=doc["problem"])


def process_results(doc: dict, results: list) -> dict:
    # take_first_k hands over one list holding the k responses: results == [[r1, ..., rk]].
    return score_math_samples(results[0], doc["answer"])
