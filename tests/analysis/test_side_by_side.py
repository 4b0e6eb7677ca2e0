"""A grid's report beside another grid's (config side_by_side; analysis.report.compare.beside), through
analysis.aggregate on grids fabricated by tests/support/grid_fixture.py: "constant" at seeds 3-5 (no
collapsed or diverged run), "interval" at seeds 0-2 (its grpo lag-8 cell has both). Their claims'
verdicts are read from each grid's own summary, and the section is checked against them."""
import dataclasses

import pytest

from analysis.aggregate import main
from analysis.cells.summary import collect, under_recipe_names
from analysis.claims.summary_file import Summary, read_summary, write_summary
from analysis.claims.verdicts import statement
from analysis.report.compare import beside, beside_sections, load_beside
from analysis.report.render import markdown
from analysis.report.write import summarize
from grid.claims import claims
from grid.config import validate
from grid.folder import GridDir
from grid.settings import Config
from grid.tuning import Tuning, confirmation_config
from tests.support.grid_fixture import CLAIMS, make_config, make_grid, written_grid

SIDE = {"grid": "constant", "label": "constant lag"}


def aggregate(config: dict) -> int:
    return main(["--grid", written_grid(config)])


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    """The "constant" grid's summary.json as analysis.cells.summary makes it (aggregate without the plots), then
    the "interval" grid aggregated beside it: (interval's config, constant's summary, interval's summary read back)."""
    results = tmp_path_factory.mktemp("results")
    constant = validate({**make_grid(results, grid="constant", seeds=(3, 4, 5)), "claims": CLAIMS})
    typed = Config.build(constant)
    there = summarize(typed, collect(typed, progress=False))
    write_summary(GridDir.of(constant).summary_path, there)
    config = {**make_grid(results, grid="interval"), "claims": CLAIMS, "side_by_side": SIDE}
    assert aggregate(config) == 0
    return config, there, read_summary(GridDir.of(config).summary_path)


def test_the_table_shows_both_verdicts_and_names_the_claims_that_differ(grids):
    config, there, summary = grids
    here = {c.claim.name: c for c in summary.claims}
    other = {c.claim.name: c for c in there.claims}
    differ = [name for name in here if here[name].verdict != other[name].verdict]
    # the fixture's numbers: sat_no_cost is negligible at seeds 3-5, undecided at 0-2; the rest undecided in both
    assert differ == ["sat_no_cost"] and (here["sat_no_cost"].verdict, other["sat_no_cost"].verdict) == (
        "undecided", "negligible")
    side = summary.side_by_side
    assert (side["grid"], side["label"], side["verdict_differs"], side["agree"]) == (
        "constant", "constant lag", differ, False)
    assert side["file"] == str(GridDir(GridDir.of(config).path.parent / "constant").summary_path)
    table = GridDir.of(config).table_path("md").read_text()
    section = table.split("## Beside constant lag (grid constant)\n", 1)[1].split("\n## ", 1)[0]
    rows = {name: [line for line in section.splitlines() if line.startswith(f"| {name}: ")] for name in here}
    assert all(len(lines) == 1 for lines in rows.values()), rows
    rows = {name: lines[0] for name, lines in rows.items()}
    for name in here:  # this grid's verdict first, then the other's, then whether they differ
        verdicts = [cell.split("**")[1] for cell in rows[name].split(" | ")[1:3]]
        assert verdicts == [here[name].verdict, other[name].verdict], rows[name]
        assert rows[name].endswith("| **differs** |" if name in differ else "| same |")
    for estimate in (here["sat_no_cost"].measured.estimate, other["sat_no_cost"].measured.estimate):
        assert f"{100 * estimate:+.1f}" in rows["sat_no_cost"]  # points, as compare prints them
    assert ("The verdict differs between this grid and constant lag for 1 of the 5 claims: "
            "sat_no_cost (undecided here, negligible there).") in section
    # compare's line: A is the other grid, B this one
    assert "**The grids do not agree within their noise**" in section
    assert "claims with another verdict: sat_no_cost (negligible in A, undecided in B)" in section


def test_no_verdict_differs_beside_the_same_runs_and_the_label_defaults_to_the_grid(grids):
    config, _, summary = grids
    other = load_beside(Config.build(validate({**config, "side_by_side": {"grid": "constant"}})))
    assert other[0] == {"grid": "constant", "label": "constant"}
    side = beside(summary, (other[0], other[1], summary))  # this grid's own summary as the other's
    assert side.verdict_differs == [] and side.agree is True
    text = "\n".join(markdown(beside_sections(Summary(side_by_side=side))))
    assert text.startswith("## Beside constant (grid constant)\n")
    assert f"No claim's verdict differs between this grid and constant ({len(CLAIMS)} claims both declare)." in text
    assert "**The grids agree within their noise**" in text
    assert beside_sections(Summary()) == [] and load_beside(Config.build(make_config(config["results_dir"]))) is None


def test_a_grid_of_another_step_budget_is_refused_naming_the_key_and_the_setting(grids):
    _, there, summary = grids
    with pytest.raises(ValueError, match=r"config key 'side_by_side' \(grid 'constant'\): summary.json key 'steps' "
                                         r"is 40 in constant.json but 20 in this grid"):
        beside(summary, (SIDE, "constant.json", dataclasses.replace(there, steps=40)))


def test_a_missing_other_summary_fails_naming_the_key_and_the_file(tmp_path, capsys):
    config = {**make_config(tmp_path, grid="interval"), "side_by_side": SIDE}
    assert aggregate(config) == 2
    error = capsys.readouterr().err
    assert (f"config key 'side_by_side.grid': {tmp_path / 'constant' / 'summary.json'} does not exist: "
            "run grid 'constant' first") in error
    written = sorted(path.name for path in GridDir.of(config).path.iterdir())
    assert written == ["config.json"], "it fails before reading or writing anything but the grid's config"


def test_a_tuned_grid_is_read_recipe_by_recipe_beside_the_same_grid_untuned(grids):
    """A tuned grid's cells and claims name its picked variants (grid.tuning.confirmation_config:
    workflow/presets/tuned_field.yaml beside its untuned twin); beside the untuned grid each is read under
    its recipe's name. Here the tuned summary is the other grid's own under the confirmation view's names
    and statements, so the two agree on every cell and claim."""
    _, there, _ = grids
    tuning = {"seeds": [100], "metric": "auc", "lags": None, "recipes": {
        "grpo": {"param": ["eps_low", "eps_high"], "values": [0.2, 0.1]}, "sat_grpo": {"param": "alpha", "values": [0.9, 0.8]},
        "grpo_r3": {"param": ["eps_low", "eps_high"], "values": [0.2, 0.1]}}}
    config = {**make_config("results", grid="constant"), "claims": CLAIMS, "tuning": tuning}
    view = validate(confirmation_config(config, Tuning.of(config), {"grpo": 0.1, "sat_grpo": 0.8, "grpo_r3": 0.2}))
    variant = dict(zip(config["recipes"], view["recipes"]))
    assert variant["sat_grpo"] == "sat_grpo.alpha-0.8"
    statements = {c.name: statement(c) for c in claims(view)}
    tuned = dataclasses.replace(
        there, tuning={"recipes": {recipe: {"variant": name} for recipe, name in variant.items()}},
        recipes=view["recipes"], cells=[dataclasses.replace(cell, recipe=variant[cell.recipe]) for cell in there.cells],
        claims=[dataclasses.replace(verdict, statement=statements[verdict.claim.name], claim=dataclasses.replace(
                 verdict.claim, **{field: variant[getattr(verdict.claim, field)] for field in ("recipe", "versus")
                                   if getattr(verdict.claim, field, None)})) for verdict in there.claims])
    assert "sat_grpo.alpha-0.8" in tuned.claims[1].statement
    assert under_recipe_names(tuned) == dataclasses.replace(there, tuning=tuned.tuning)
    side = beside(tuned, (SIDE, "constant.json", there))
    assert side.agree is True and side.verdict_differs == [] and len(side.claims) == len(CLAIMS)
    assert side.cells_only_in == {"a": [], "b": []} and side.claims_defined_differently == []
