"""`make ui` (tracking.ui): the server it starts, the links it prints, and what a person sees at those
links in a real headless browser (Debian's chromium, which CI installs with apt-get)."""
import json
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from analysis import curves
from harness.config import load
from tests.support.grid_fixture import make_grid
from tests.support.optional import missing as optional_input_missing
from tests.support.ui_check import CHROMIUM, chart_traces, render, running_ui, synced_grid, visible_text
from tracking.sync import sync

# Kept after the run for a person (or CI) to look at, outside the checkout (the suite writes nothing there)
SCREENSHOTS = Path(os.environ.get("STALEBENCH_SCREENSHOTS") or Path(tempfile.gettempdir()) / "stalebench-ui-check")


@pytest.mark.slow  # an MLflow UI server
def test_ui_serves_the_store_and_prints_the_runs_view_link(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = make_grid(tmp_path / "results")
    marker = sync(config, progress=False, final=False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with running_ui(tmp_path / "config.yaml") as (_, links):
        base, _, fragment = links[0].partition("/#/")
        assert base.startswith("http://127.0.0.1:") and base != "http://127.0.0.1:0"
        assert fragment.startswith(f"experiments/{marker['experiment_id']}/runs?")
        query = urllib.parse.parse_qs(fragment.partition("?")[2])
        assert query["workflowType"] == ["machine_learning"] and query["compareRunsMode"] == ["CHART"]
        assert query["searchFilter"] == ["tags.\"stalebench.kind\" = 'run'"]
        found = json.loads(urllib.request.urlopen(
            f"{base}/api/2.0/mlflow/experiments/get?experiment_id={marker['experiment_id']}", timeout=30).read())
        assert found["experiment"]["name"] == config["grid"]
    with pytest.raises(OSError):  # stopping tracking.ui stopped its server
        urllib.request.urlopen(f"{base}/health", timeout=5)


def seed_runs_page(dom: str, config: dict) -> list[str]:
    """What a person looks for on the seed runs' page, missing from the rendered page."""
    chart = f"eval/{curves.test_task(config['eval'])}/score"
    run = f"{config['recipes'][0]}/lag{config['lags'][0]}/seed0"
    missing = [] if chart_traces(dom, chart) else [f"the {chart} chart with its curves"]
    return missing + ([] if run in visible_text(dom) else [f"the run {run}"])


def comparison_page(dom: str, config: dict) -> list[str]:
    """The cell comparison: one curve per cell (recipe x lag) on the test-score chart, every cell listed."""
    chart = f"eval/{curves.test_task(config['eval'])}/score"
    cells = [f"summary {recipe}/lag{lag}" for recipe in config["recipes"] for lag in config["lags"]]
    drawn = chart_traces(dom, chart)
    missing = [] if drawn == len(cells) else [f"{len(cells)} curves on the {chart} chart (it draws {drawn})"]
    return missing + [cell for cell in cells if cell not in visible_text(dom)]


def parent_run_page(dom: str, config: dict) -> list[str]:
    """The grid's parent run: each claim's name and verdict in its description."""
    text = visible_text(dom)
    return [f"claim {c['name']}: {c['verdict']}" for c in json.loads(
        (Path(config["results_dir"]) / config["grid"] / "summary.json").read_text())["claims"]
            if c["name"] not in text or c["verdict"] not in text]


# What each link `make ui` prints must show, in the order it prints them: (page name, check); then the
# parent run's page (its link: the seed runs' experiment at the run mlflow.json names).
PAGES = [("seed_runs", seed_runs_page), ("comparison", comparison_page)]


@pytest.mark.browser
@pytest.mark.slow
def test_printed_links_show_what_a_person_looks_for(tmp_path):
    if not Path(CHROMIUM).exists():  # .ci/run installs it and requires the check (STALEBENCH_REQUIRE=browser)
        optional_input_missing("browser", f"the browser check needs Debian's chromium at {CHROMIUM}: apt-get install chromium")
    config_path = synced_grid(tmp_path)
    config = load(config_path)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    marker = json.loads((Path(config["results_dir"]) / config["grid"] / "mlflow.json").read_text())
    with running_ui(config_path) as (_, links):
        assert len(links) == len(PAGES), links
        base = links[0].partition("/#/")[0]
        parent = f"{base}/#/experiments/{marker['experiment_id']}/runs/{marker['parent_run_id']}"
        for (name, check), link in [*zip(PAGES, links), (("parent_run", parent_run_page), parent)]:
            shot = tmp_path / f"{name}.png"
            missing = check(render(link, shot), config)
            kept = SCREENSHOTS / shot.name
            with tempfile.NamedTemporaryFile(dir=SCREENSHOTS, suffix=".png", delete=False) as partial:
                shutil.copyfile(shot, partial.name)
            os.chmod(partial.name, 0o644)
            os.replace(partial.name, kept)
            assert not missing, f"the {name} page ({link}) does not show {missing}; screenshot: {kept}"
            assert kept.stat().st_size > 10_000, f"{kept} is nearly empty: the page drew nothing"
