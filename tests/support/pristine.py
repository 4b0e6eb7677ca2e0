"""A folder put back as it was: for a module fixture that is expensive to build (a completed grid)
and tests that change it. Each test then starts from the same state, whatever ran before it."""
from __future__ import annotations

import shutil
from pathlib import Path


class Pristine:
    """``Pristine(folder)`` keeps a copy of ``folder`` beside it; ``restore()`` puts it back in place:
    the same absolute paths (Snakemake keeps its metadata by output path) and modification times
    (Snakemake compares them), so Snakemake sees the folder exactly as it was."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.copy = self.folder.with_name(self.folder.name + ".pristine")
        shutil.copytree(self.folder, self.copy, symlinks=True)

    def restore(self) -> None:
        shutil.rmtree(self.folder)
        shutil.copytree(self.copy, self.folder, symlinks=True)
