"""Crash-safe file writes shared by every stage: write a temp file beside the target, then rename."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

_TEMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0o022)  # read it the only way there is (Python has no getter), then put it back
    os.umask(mask)
    return mask


# what open() gives a new file (0644 under the usual umask 022): mkstemp's temp file is 0600, and an output renamed
# from it would be hidden from the group and others (a shared results folder's readers, a web server)
_FILE_MODE = 0o666 & ~_umask()


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), _FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def remove_temp_files(folder: str | Path) -> list[Path]:
    """Remove the temp files that writes killed before their rename left in ``folder`` (not below it);
    returns them. Call it only as the folder's one writer (its lock held): another writer's temp file
    is a write in progress."""
    leftovers = [path for path in Path(folder).glob(f".*{_TEMP_SUFFIX}") if path.is_file()]
    for path in leftovers:
        path.unlink()
    return leftovers


def write_json_atomic(path: str | Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl_atomic(path: str | Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def read_json(path: str | Path):
    """A JSON file's content; a damaged file raises ValueError naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSON-lines file ([] if there is none); a damaged line (a cut last line after a
    disk error or a bad copy) raises ValueError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return []
    return [_parse_line(path, number, line)
            for number, line in enumerate(path.read_text().splitlines(), start=1) if line.strip()]


def _parse_line(path: Path, number: int, line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}, line {number}: not valid JSON ({error})") from None


def append_jsonl_atomic(path: str | Path, rows: list[dict], *, increasing: str | None = None) -> None:
    """Append rows by rewriting the file atomically: a reader never sees a half-written line.

    ``increasing="step"``: a per-step log; a row whose step is not after the previous one raises
    ValueError and nothing is written (two writers on one run, or a resume that did not cut the
    file back to its state, would otherwise leave duplicate steps that skew every average)."""
    path = Path(path)
    existing = path.read_text() if path.exists() else ""
    if increasing is not None:
        lines = existing.splitlines()
        last = _parse_line(path, len(lines), lines[-1])[increasing] if lines and lines[-1].strip() else None
        for row in rows:
            if last is not None and not row[increasing] > last:
                raise ValueError(f"{path}: refusing {increasing} {row[increasing]} after {increasing} {last} "
                                 "(steps must increase: is another process writing this run?)")
            last = row[increasing]
    write_text_atomic(path, existing + "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
