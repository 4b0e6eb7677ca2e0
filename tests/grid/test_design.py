"""grid.design: the declared design pinned once at the first look, and a request that reads the runs
another way (other seeds, fewer claims, another schedule) refused, naming what differs."""
from __future__ import annotations

import pytest

from grid.config import load
from grid.design import declared_design, pin_design, refuse_redeclared
from grid.settings import Config
from tests.support.paths import ROOT


def _config(tmp_path, **overrides) -> Config:
    return Config.build(load(ROOT / "config.yaml", {"results_dir": str(tmp_path), **overrides}))


def test_the_design_holds_what_the_claims_read_and_is_written_once(tmp_path):
    demo = _config(tmp_path)
    design = declared_design(demo, 0.05)
    assert design["m"] == len(demo.claims) == len(design["claims"]) and design["seeds"] == list(demo.seeds)
    assert (design["looks"], design["boundary"], design["alpha"]) == (list(demo.seeding.looks), demo.seeding.boundary, 0.05)
    assert not demo.folder.design_path.exists()
    refuse_redeclared(demo)  # before the first look: nothing pinned, anything goes
    assert pin_design(demo, 0.05) == design and demo.folder.design_path.exists()
    written = demo.folder.design_path.read_bytes()
    assert pin_design(demo, 0.05) == design and demo.folder.design_path.read_bytes() == written  # once


@pytest.mark.parametrize("overrides, differs", [
    ({"seeds": [0]}, "seeds [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] -> [0]; looks [5, 8, 12] -> [1]; boundary"),
    ({"seeds": list(range(8))}, "looks [5, 8, 12] -> [5, 8]"),
    ({"seeding": {"looks": [4, 12], "boundary": "pocock"}}, "seeding"),
    ({"lags": [1]}, "lags [1, 8] -> [1]")])
def test_another_reading_of_the_pinned_runs_is_refused_naming_what_differs(tmp_path, overrides, differs):
    pin_design(_config(tmp_path), 0.05)
    other = _config(tmp_path, **overrides)
    with pytest.raises(ValueError) as refused:
        refuse_redeclared(other)
    said = str(refused.value)
    assert said.startswith(f"{other.folder.design_path} pins the design") and "add -C grid=NAME" in said
    assert differs in said
    with pytest.raises(ValueError, match="pins the design"):
        pin_design(other, 0.05)  # the aggregate and the first look refuse it too


def test_a_smaller_family_is_refused_with_its_size(tmp_path):
    demo = _config(tmp_path)
    pin_design(demo, 0.05)
    two = [dict(section) for section in demo.raw["claims"][:2]]
    with pytest.raises(ValueError, match=r"; m 4 -> 2"):
        refuse_redeclared(_config(tmp_path, claims=two))
