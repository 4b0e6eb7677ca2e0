"""Every report of three fabricated grids (every claim kind, a seed schedule, tuning, gain sources, a grid
beside another) byte for byte as the code at tests/fixtures/golden/ wrote them: table.md, table.csv,
table.tex, summary.json and the MLflow store's params, metrics and tags (tests/support/golden_reports.py).
A change that is meant to move a report rewrites the expected files, and its diff shows what moved."""
import pytest

from tests.support.golden_reports import GOLDEN, snapshots

pytestmark = pytest.mark.slow  # three grids aggregated and synced: ~45 s on 2 cores


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return snapshots(tmp_path_factory.mktemp("golden") / "results")


@pytest.mark.parametrize("grid", ["beside", "every_kind", "tuned"])
@pytest.mark.parametrize("name", ["table.md", "table.csv", "table.tex", "summary.json", "store.json"])
def test_each_report_is_as_before(written, grid, name):
    expected = (GOLDEN / grid / name).read_text()
    assert written[grid][name] == expected, f"{grid}/{name} differs from {GOLDEN / grid / name}"
