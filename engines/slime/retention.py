"""Keep only the last N Megatron checkpoints of a run: ``python3 -m engines.slime.retention DIR --keep N``.

Megatron (torch_dist) writes ``DIR/iter_<7 digits>/`` per save and, once a save is complete, the
iteration into ``DIR/latest_checkpointed_iteration.txt``; a resumed job loads that iteration. With
the optimizer state each save of a 30B model is hundreds of GB, so the job script runs this every
few minutes in the background and once more at the end. Only saves at or before the recorded
latest one count, so a save still being written is never touched; older ones beyond the newest N
are renamed away first (a half-deleted directory never looks like a checkpoint), then removed.
HF checkpoints (train/hf, train/checkpoints) are the evaluation's and are not touched.
"""
from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
_ITER = re.compile(r"^iter_(\d+)$")


def prune(directory: str | Path, keep: int) -> list[Path]:
    """Remove the complete Megatron saves older than the newest ``keep``; returns what was removed."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    directory = Path(directory)
    tracker = directory / TRACKER
    if not tracker.is_file():
        return []
    latest = tracker.read_text().strip()
    if not latest.isdigit():  # "release" or a tracker being rewritten: leave everything
        return []
    saves = sorted((int(m.group(1)), path) for path in directory.iterdir()
                   if (m := _ITER.match(path.name)) and path.is_dir() and int(m.group(1)) <= int(latest))
    removed = []
    for _, path in saves[:-keep]:
        doomed = path.with_name(f".{path.name}.removing")
        path.rename(doomed)
        shutil.rmtree(doomed)
        removed.append(path)
    return removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="the run's Megatron checkpoint directory (--save)")
    parser.add_argument("--keep", type=int, required=True)
    args = parser.parse_args(argv)
    for path in prune(args.directory, args.keep):
        print(f"engines.slime.retention: removed {path}")


if __name__ == "__main__":
    main()
