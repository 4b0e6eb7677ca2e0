"""Write analysis/statistics/look_levels.json: the look levels (analysis.statistics.boundaries) of every
shipped config's seed schedule (config.yaml, workflow/presets/*.yaml) at its declared family's level
(ALPHA over its claims), and of the schedules a grid narrowed to fewer seeds cuts it to.

    .venv/bin/python -m analysis.schedule.levels_cache
"""
from __future__ import annotations

from pathlib import Path

from analysis.statistics.boundaries import CACHE, write_cache
from analysis.statistics.intervals import ALPHA
from grid.claims import Seeding
from grid.config import load
from grid.settings import Config

ROOT = Path(__file__).resolve().parents[2]


def designs(config: Config) -> list[tuple[tuple[int, ...], float, str]]:
    """(looks, level, boundary) of the config's declared schedule cut to each seed count it allows."""
    if config.seeding_declared is None:
        return []
    level = ALPHA / max(len(config.claims), 1)
    section = {"looks": list(config.seeding_declared["looks"]), "boundary": config.seeding_declared["boundary"]}
    cut = [Seeding.of({"seeding": section, "seeds": config.seeds[:count]}) for count in range(2, len(config.seeds) + 1)]
    return [(seeding.looks, level, seeding.boundary) for seeding in cut if seeding is not None]


def main() -> None:
    paths = [ROOT / "config.yaml", *sorted((ROOT / "workflow" / "presets").glob("*.yaml"))]
    shipped = list(dict.fromkeys(design for path in paths for design in designs(Config.build(load(path)))))
    for entry in write_cache(shipped):
        print(entry["looks"], f"{entry['level']:g}", entry["boundary"], [f"{v:.6g}" for v in entry["levels"]])
    print(f"wrote {CACHE.relative_to(ROOT)}: {len(shipped)} designs")


if __name__ == "__main__":
    main()
