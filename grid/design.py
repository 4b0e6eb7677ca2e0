"""The declared design of a grid, pinned in its folder at the first look (design.json, GridDir.design_path):
what its confirmatory answer reads (docs/statistics.md, "The declared design is pinned").

The first job that reads the claims (the first look's interim job under a seed schedule, else the aggregate)
writes it once: the recipes, lags and seeds, the claims, the family size m, the seed schedule (as declared
and the looks this grid runs, with their boundary) and the family's level alpha. From then on a request
that reads those runs another way (fewer claims, other seeds, another schedule, other cells) is refused
before any job starts, naming what differs and the command that does it right: a grid of its own,
declared before its runs. Refusing is the simpler honest design: the folder keeps one answer (table.md,
summary.json, the MLflow parent and its verdicts.md), and no reading chosen after the outcomes were seen
can replace or sit beside it under the same name.
"""
from __future__ import annotations

import json

from grid.folder import GridDir
from grid.settings import Config
from harness.io import read_json, write_json_atomic


def declared_design(config: Config, alpha: float) -> dict:
    """What the claims of ``config`` read, in design.json's form (plain JSON values)."""
    seeding = config.seeding
    design = {"recipes": list(config.recipes), "lags": list(config.lags), "seeds": list(config.seeds),
              "claims": [claim.row() for claim in config.claims], "m": len(config.claims),
              "seeding": None if config.seeding_declared is None else dict(config.seeding_declared),
              "looks": list(seeding.looks) if seeding else [len(config.seeds)],
              "boundary": seeding.boundary if seeding else None, "alpha": alpha}
    return json.loads(json.dumps(design))  # tuples as lists, as the file holds them


def pinned_design(folder: GridDir) -> dict | None:
    """The grid folder's design.json; None before its first look."""
    return read_json(folder.design_path) if folder.design_path.exists() else None


def changed_keys(pinned: dict, asked: dict) -> list[str]:
    """The design keys whose values differ."""
    return [key for key in asked if pinned.get(key) != asked[key]]  # in the design's order, not the file's


def refusal(config: Config, pinned: dict, asked: dict) -> str | None:
    """The error for a request whose design differs from the pinned one; None when they agree."""
    keys = changed_keys(pinned, asked)
    if not keys:
        return None
    differs = "; ".join(f"{key} {_short(pinned.get(key))} -> {_short(asked[key])}" for key in keys)
    return (f"{config.folder.design_path} pins the design this grid declared at its first look, and this request "
            f"reads its runs another way: {differs}. The grid's confirmatory answer (table.md, summary.json, the "
            "MLflow parent) stays as declared: rerun it without these overrides. Another family, seed list or "
            "schedule is a design of its own, declared before its runs: add -C grid=NAME (a new grid folder, its "
            "runs trained anew; a family or seed list chosen after this grid's outcomes is exploratory there too).")


def _short(value) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict):  # claims: their names
        return "[" + ", ".join(str(row.get("name")) for row in value) + "]"
    return json.dumps(value)


def refuse_redeclared(config: Config, alpha: float | None = None) -> None:
    """ValueError when ``config`` reads a pinned grid's runs under another design (before any job)."""
    pinned = pinned_design(config.folder)
    if pinned is None:
        return
    asked = declared_design(config, pinned["alpha"] if alpha is None else alpha)
    message = refusal(config, pinned, asked)
    if message:
        raise ValueError(message)


def pin_design(config: Config, alpha: float) -> dict:
    """Write design.json once (the first look); a later call checks the config against it. Returns the pinned design."""
    refuse_redeclared(config, alpha)
    pinned = pinned_design(config.folder)
    if pinned is None:
        pinned = declared_design(config, alpha)
        config.folder.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(config.folder.design_path, pinned)
    return pinned
