"""`make ui` (tracking.ui): the server it starts, the links it prints, and what a person sees at those
links in a real headless browser (Debian's chromium, which CI installs with apt-get)."""
import html
import json
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from analysis.claims.summary_file import read_summary
from analysis.claims.verdicts import replication_text
from analysis.report.colors import recipe_colour
from analysis.report.dynamics import BAND, dynamics_keys
from analysis.report.interval_plots import claim_key, cost_key
from analysis.report.tables import claim_text
from grid.claims import NOT_TESTED
from grid.config import load
from grid.folder import GridDir
from harness.io import read_json
from grid.settings import Config
from tests.support.colour_distance import closest_pair
from tests.support.grid_fixture import make_grid
from tests.support.optional import missing as optional_input_missing
from tests.support.ui_check import CHROMIUM, Browser, chart_card, render, running_ui, synced_grid, visible_text
from tracking.layout import Y_SCORE, staleness_cost_metric
from tracking.store import DYNAMICS_VIEW, KIND, SEED_RUNS_FILTER, SEED_RUNS_VIEW
from tracking.sync import sync

# Kept after the run for a person (or CI) to look at, outside the checkout (the suite writes nothing there)
SCREENSHOTS = Path(os.environ.get("STALEBENCH_SCREENSHOTS") or Path(tempfile.gettempdir()) / "stalebench-ui-check")


@pytest.mark.slow  # an MLflow UI server
def test_ui_serves_the_store_and_prints_the_runs_view_link(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = make_grid(tmp_path / "results")
    marker = sync(Config.build(config), progress=False, final=False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with running_ui(tmp_path / "config.yaml") as (_, links):
        base, _, fragment = links[0].partition("/#/")
        assert base.startswith("http://127.0.0.1:") and base != "http://127.0.0.1:0"
        assert fragment.startswith(f"experiments/{marker['experiment_id']}/runs?")
        query = urllib.parse.parse_qs(fragment.partition("?")[2])
        assert query["workflowType"] == ["machine_learning"] and query["compareRunsMode"] == ["CHART"]
        first = SEED_RUNS_VIEW.format(lag=min(config["lags"]))
        # not aggregated: no comparison yet; the training dynamics and the seed runs of each lag
        assert query["viewStateShareKey"] == [DYNAMICS_VIEW.format(lag=min(config["lags"]))]
        assert len(links) == 2 * len(config["lags"]) and SEED_RUNS_VIEW.format(lag=min(config["lags"])) in links[-2]
        view = json.loads(urllib.request.urlopen(  # the shared view the link opens, as the sync stored it
            f"{base}/api/2.0/mlflow/experiments/get?experiment_id={marker['experiment_id']}", timeout=30).read())
        tags = {t["key"]: t["value"] for t in view["experiment"]["tags"]}
        assert json.loads(tags["mlflow.sharedViewState." + first])["searchFilter"].startswith(SEED_RUNS_FILTER + " AND ")
        found = json.loads(urllib.request.urlopen(
            f"{base}/api/2.0/mlflow/experiments/get?experiment_id={marker['experiment_id']}", timeout=30).read())
        assert found["experiment"]["name"] == config["grid"]
    with pytest.raises(OSError):  # stopping tracking.ui stopped its server
        urllib.request.urlopen(f"{base}/health", timeout=5)


def drawn_lines(dom: str, title: str) -> list[str]:
    """The stroke colour of each run or group the chart card titled ``title`` draws (the UI draws each
    line twice: once opaque, once faint for highlighting; the opaque ones)."""
    return re.findall(r'class="js-line"[^>]*? stroke: (rgb\([^)]*\)); stroke-opacity: 1;', chart_card(dom, title))


def rgb(colour: str) -> str:
    """'#8396a5' as the browser writes it in a style: 'rgb(131, 150, 165)'."""
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


def recipe_lines(dom: str, config: dict, chart: str, what: str, y_axis: str | None = None) -> list[str]:
    """What is missing for the chart card titled ``chart`` to draw a line per recipe over a band in the recipe's
    colour (analysis.report.colors, the PNGs' too), every recipe named in its legend, and its axes named (the x
    axis by the UI, the y axis by the title: ``y_axis``, the test score's by default). A training metric's line
    broken where a diverged run logged NaN is drawn in pieces: ``y_axis`` given, each colour counts once."""
    card, recipes = chart_card(dom, chart), config["recipes"]
    lines, bands = drawn_lines(dom, chart), re.findall(r'class="js-fill"[^>]*?[ "]fill: (rgb\([^)]*\))', card)
    missing = [] if card else [f"a chart titled {chart!r}"]
    lines = sorted(set(lines)) if y_axis else lines
    if sorted(lines) != sorted(rgb(recipe_colour(recipe, recipes)) for recipe in recipes):
        missing.append(f"{what}: a line per recipe {recipes} in its colour "
                       f"{[rgb(recipe_colour(r, recipes)) for r in recipes]} (it draws {lines})")
    if sorted(bands) != sorted(lines):
        missing.append(f"a band under each line on {chart} (bands {bands}, lines {lines})")
    missing += [f"{recipe} in the legend of {chart}" for recipe in recipes if not named(recipe, visible_text(card))]
    if not re.search(r'class="xtitle"[^>]*>Step<', card):
        missing.append(f"the x axis named on {chart} (Step)")
    y_axis = y_axis or Y_SCORE
    if y_axis not in visible_text(dom):
        missing.append(f"the y axis named on {chart} ({y_axis!r}, its section's title)")
    return missing


def score_chart(config: dict) -> str:
    """The title of a view's test-score chart (its metric), whose section's title names the y axis (tracking.layout)."""
    return f"eval/{Config.build(config).eval.test_task}/score"


def seed_runs_page(dom: str, config: dict, lag: int) -> list[str]:
    """The seed runs at one lag as a comparison: grouped by recipe, a line per recipe in its colour over the band
    of its seeds, the axes named, a recipe clause in the filter, and no band (a comparison's run) among the runs."""
    missing = recipe_lines(dom, config, score_chart(config), f"seed runs at lag {lag}")
    if "params.recipe LIKE" not in html.unescape(dom):
        missing.append("the recipe filter (params.recipe LIKE ...) in the search box")
    shown = visible_text(dom)
    missing += [f"no band run listed ({name})" for name in re.findall(r"\S+/lag\d+ (?:low|high)", shown)]
    return missing


def dynamics_page(dom: str, config: dict, lag: int) -> list[str]:
    """The training dynamics at one lag: per metric the fabricated runs log (entropy, reward, |d|), a chart with a line
    per recipe in its colour over its seeds' band, the section naming the metric and the band's method."""
    missing = []
    for name, keys in dynamics_keys(["entropy", "reward", "d/mean_abs", "loss"]):
        y_axis = f"{name}, band {BAND}"
        missing += [problem for key in keys
                    for problem in recipe_lines(dom, config, f"train/{key}", f"dynamics at lag {lag}", y_axis)]
    return missing


def named(recipe: str, text: str) -> bool:
    """``recipe`` as a whole name in ``text`` (grpo, not the grpo of grpo_r3)."""
    return re.search(rf"(?<![\w.]){re.escape(recipe)}(?![\w.])", text) is not None


def comparison_page(dom: str, config: dict, lag: int) -> list[str]:
    """The cell comparison at one lag: a line per recipe over its 95% band, each in a colour of its own, every
    recipe named (the group is the recipe alone: one colour per recipe at every lag), the band named (its level
    and method); the run list folded to a row per recipe: no band run (mean, low, high) listed."""
    missing = recipe_lines(dom, config, score_chart(config), f"comparison at lag {lag}")
    if f"{Y_SCORE}, 95% " not in visible_text(dom):
        missing.append("the band named on the chart (95%, its method)")
    listed = re.findall(r"\S+/lag\d+ (?:mean|low|high)", visible_text(dom))
    return missing + [f"no band run listed ({name})" for name in listed]


def interval_keys(config: dict) -> list[str]:
    """The intervals' charts' image keys: each recipe's staleness cost at each lag but the reference, each tested
    claim's contrast."""
    summary = read_json(GridDir.of(config).summary_path)
    keys = [cost_key(staleness_cost_metric(read_summary(GridDir.of(config).summary_path).claims), lag)
            for lag in summary["lags"]
            if lag != summary["reference_lag"]]
    return keys + [claim_key(claim["name"]) for claim in summary["claims"] if claim["verdict"] != NOT_TESTED]


def intervals_page(dom: str, config: dict) -> list[str]:
    """The intervals' charts: an image chart each (drawn by analysis.report.interval_plots, categories named on its
    axis)."""
    images = re.findall(r'<img class="rc-image-img" src="get-artifact\?path=images%2F([^%]*)%2B', dom)
    return [f"the chart {key} and its image" for key in interval_keys(config)
            if f'title="{key}"' not in dom or key.replace("/", "~") not in images]


INTERVAL_IMAGES = """(() => {
  const images = [...document.querySelectorAll('img.rc-image-img')];
  if (images.length < 2 || !images.every(i => i.complete && i.naturalWidth > 0)) return null;
  return images.map(i => ({shown: i.getBoundingClientRect().width, drawn: i.naturalWidth}));
})()"""


def interval_image_sizes(link: str, screenshot: Path) -> list[dict] | None:
    """The intervals view's images in a 1440x900 window, once loaded and laid out (None if they never are): the width
    each is shown at and the width it is drawn at (its pixels); a screenshot of that window."""
    import time
    with Browser(1440, 900) as browser:
        page = browser.open(link)
        sizes = browser.wait_for(page, INTERVAL_IMAGES)
        for _ in range(20):  # the hidden run list's panel folds after the images load: until two reads agree
            time.sleep(1)
            sizes, before = browser.evaluate(page, INTERVAL_IMAGES), sizes
            if sizes == before:
                break
        browser.screenshot(page, screenshot)
    return sizes


def parent_run_page(dom: str, config: dict) -> list[str]:
    """The report page (the grid's parent run at verdicts.md): a row per claim, its full name, its outcome, its estimate
    with its interval and P(same outcome on a rerun); a link to every view (tracking.store's, by their shared views)."""
    # the UI renders a Markdown table as rows and cells by their ARIA roles
    rows = [[" ".join(html.unescape(visible_text(f"<div {cell}>")).split()) for cell in row.split('role="cell"')[1:]]
            for row in dom.split('role="row"')[1:]]
    shown = {row[0]: " | ".join(row[1:]) for row in rows if len(row) > 1}
    missing = []
    for claim in read_summary(GridDir.of(config).summary_path).claims:
        row = shown.get(claim.claim.name, "")
        missing += [f"claim {claim.claim.name}: {part}" for part in (
            f"{claim.verdict} | {claim_text(claim)} | {replication_text(claim, with_range=True)}",) if part not in row]
    views = ["stalebench-intervals", *(f"stalebench-{kind}-lag{lag}" for kind in ("dynamics", "cells", "seeds")
                                       for lag in config["lags"])]
    missing += [f"a link to the view {view}" for view in views if f"viewStateShareKey={view}" not in dom]
    # each interval chart at full size, its PNG's artifact page; relative links (#/...): they keep a path prefix
    missing += [f"a link to the chart {key}'s image" for key in interval_keys(config)
                if f"/artifacts/images/{key.replace('/', '~')}+" not in dom]
    return missing + ["no link from the UI's root (/#/), which drops a path prefix"] * ('href="/#/' in dom)


CLAIMS_TABLE_BOX = """(() => {
  const cells = [...document.querySelectorAll('[role="row"] [role="cell"], [role="row"] [role="columnheader"]')];
  if (cells.length < %d) return null;
  const boxes = cells.map(cell => cell.getBoundingClientRect());
  const cut = [];  // the table or a header wider than the box that shows it (scrolled or cut with an ellipsis)
  for (let e = cells[0].parentElement; e && e !== document.body; e = e.parentElement)
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible') cut.push('table');
  for (const cell of cells) if (cell.scrollWidth > cell.clientWidth + 1) cut.push(cell.textContent);
  return {bottom: Math.max(...boxes.map(b => b.bottom)), right: Math.max(...boxes.map(b => b.right)),
          height: window.innerHeight, width: window.innerWidth, cut};
})()"""


CUT_TITLES = """(() => {
  if (document.querySelectorAll('.js-line').length === 0) return null;
  const box = e => { while (e && e.clientWidth === 0) e = e.parentElement; return e; };  // an inline text's block
  return [...document.querySelectorAll('*')].filter(e => e.children.length === 0
    && (e.textContent.startsWith('y: ') || e.textContent.includes(', band ')))
    .filter(e => { const b = box(e); return b && b.scrollWidth > b.clientWidth + 1; }).map(e => e.textContent);
})()"""


def cut_titles(link: str, screenshot: Path) -> list[str] | None:
    """The chart sections' titles (each names its y axis or its band) that a 1440x900 window cuts (text wider than its box), once
    the charts are drawn (None if they never are); a screenshot of that window."""
    with Browser(1440, 900) as browser:
        page = browser.open(link)
        cut = browser.wait_for(page, f"(() => {{ const cut = {CUT_TITLES}; return cut && {{cut}}; }})()")
        browser.screenshot(page, screenshot)
    return None if cut is None else cut["cut"]


def claims_table_fits(link: str, config: dict, screenshot: Path) -> dict:
    """Where the report page's claims table lies in a 1440x900 window, once drawn: its cells' lowest bottom and
    rightmost right edge, and the window's size (a screenshot of what shows without scrolling)."""
    claims = read_json(GridDir.of(config).summary_path)["claims"]
    with Browser(1440, 900) as browser:
        page = browser.open(link)
        box = browser.wait_for(page, CLAIMS_TABLE_BOX % (4 * (len(claims) + 1)))
        browser.screenshot(page, screenshot)
    return box


def pages(config: dict) -> list[tuple[str, object]]:
    """What each link `make ui` prints must show, in the order it prints them, the claims first: (page name, check)."""
    return [("verdicts", parent_run_page), ("intervals", intervals_page),
            *((f"comparison_lag{lag}", lambda dom, config, lag=lag: comparison_page(dom, config, lag))
              for lag in config["lags"]),
            *((f"dynamics_lag{lag}", lambda dom, config, lag=lag: dynamics_page(dom, config, lag))
              for lag in config["lags"]),
            *((f"seed_runs_lag{lag}", lambda dom, config, lag=lag: seed_runs_page(dom, config, lag))
              for lag in config["lags"])]


@pytest.mark.browser
@pytest.mark.slow
def test_printed_links_show_what_a_person_looks_for(tmp_path):
    if not Path(CHROMIUM).exists():  # .ci/run installs it and requires the check (STALEBENCH_REQUIRE=browser)
        optional_input_missing("browser", f"the browser check needs Debian's chromium at {CHROMIUM}: apt-get install chromium")
    config_path = synced_grid(tmp_path)
    config = load(config_path)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    doms = {}
    with running_ui(config_path) as (_, links):
        assert len(links) == len(pages(config)), links
        for (name, check), link in zip(pages(config), links):
            shot = tmp_path / f"{name}.png"
            doms[name] = render(link, shot)
            missing = check(doms[name], config)
            kept = SCREENSHOTS / shot.name
            with tempfile.NamedTemporaryFile(dir=SCREENSHOTS, suffix=".png", delete=False) as partial:
                shutil.copyfile(shot, partial.name)
            os.chmod(partial.name, 0o644)
            os.replace(partial.name, kept)
            assert not missing, f"the {name} page ({link}) does not show {missing}; screenshot: {kept}"
            assert kept.stat().st_size > 10_000, f"{kept} is nearly empty: the page drew nothing"
        # section titles whole in a 1440x900 window (the UI cuts a long one with an ellipsis)
        for name in (f"comparison_lag{max(config['lags'])}", f"dynamics_lag{max(config['lags'])}"):
            shot = SCREENSHOTS / f"{name}_1440x900.png"
            assert cut_titles(links[[n for n, _ in pages(config)].index(name)], shot) == [], f"titles cut: {shot}"
        # the interval charts read in place: each card shows its image >= 330 px wide in a 1440x900 window (its
        # 10-point text at >= 10 px), drawn with at least as many pixels (not MLflow's 256 px thumbnail blown up)
        shot = SCREENSHOTS / "intervals_1440x900.png"
        sizes = interval_image_sizes(links[[n for n, _ in pages(config)].index("intervals")], shot)
        assert sizes and all(330 <= size["shown"] <= size["drawn"] for size in sizes), f"{sizes}; screenshot: {shot}"
        # the report page fits a researcher's screen: the whole claims table in a 1440x900 window, no scrolling
        box = claims_table_fits(links[0], config, SCREENSHOTS / "report_1440x900.png")
        assert box and box["bottom"] <= box["height"] and box["right"] <= box["width"] and not box["cut"], \
            f"the claims table does not fit 1440x900 ({box}); screenshot: {SCREENSHOTS / 'report_1440x900.png'}"
    # no interval among the results: the grid's and its summary's experiments hold no run of a band (low, high)
    # nor the intervals' charts (tracking.store.KIND drawn, figure: the comparison experiment's alone)
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{Path(config['results_dir']).resolve() / 'mlflow.db'}")
    results = [client.get_experiment_by_name(config["grid"] + suffix).experiment_id for suffix in ("", " summary")]
    drawn = [run.info.run_name for run in client.search_runs(results, max_results=1000)
             if run.info.run_name.endswith((" low", " high")) or run.data.tags[KIND] in ("drawn", "figure")]
    assert not drawn, f"interval runs among the results (run list, Compare, search): {drawn}"
    # one colour per recipe: the lines of every grouped view (the lags' comparisons and seed runs), recipe by
    # recipe in the same colours (each page's check compared them with analysis.report.colors, the PNGs' colours)
    colours = {name: sorted(drawn_lines(dom, score_chart(config))) for name, dom in doms.items()
               if name.startswith(("comparison", "seed_runs"))}
    colours["dynamics"] = sorted(drawn_lines(doms[f"dynamics_lag{max(config['lags'])}"], "train/entropy"))
    assert len({tuple(lines) for lines in colours.values()}) == 1, f"a recipe's colour differs between views: {colours}"
    # chosen, not hashed: the colours drawn are far apart, to a colour-blind eye too (issue 65: the hash gave two
    # recipes of a claim #434a93 and #445461, 15 apart to a protanope)
    closest = closest_pair(next(iter(colours.values())))
    assert closest[0] > 39, f"two recipes' colours look alike: {closest}"
