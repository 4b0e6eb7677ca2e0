"""metrics.jsonl without each row's ``time`` (when the step was produced): what bit-identity of two
runs of one config means (the same numbers, produced at different times)."""
import json

from harness.io import read_jsonl


def untimed_rows(path) -> list[str]:
    """Each row as canonical JSON without ``time`` (text, so that NaN compares equal to NaN)."""
    return [json.dumps({k: v for k, v in row.items() if k != "time"}, sort_keys=True) for row in read_jsonl(path)]
