"""What a person sees in `make ui`: the reduced test grid's synced store, tracking.ui serving it on a
port the server takes itself, and Debian's headless chromium at the links it prints (a screenshot and
the rendered DOM of each page). Used by tests/tracking/test_track_ui.py and benchmarks/ (ui_screenshot,
bench_ui_memory)."""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"  # Debian's package (apt-get install chromium), as CI installs it


def synced_grid(folder: Path) -> Path:
    """The reduced test grid under ``folder`` with its claims, aggregated and synced; returns its config file."""
    from analysis.report.write import write_reports
    from grid.config import validate
    from grid.settings import Config
    from tests.support.grid_fixture import CLAIMS, make_grid
    from tracking.sync import sync
    config = validate({**make_grid(folder / "results"), "claims": CLAIMS})
    typed = Config.build(config)
    write_reports(typed, progress=False)
    sync(typed, progress=False)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def running_ui(config_path: Path):
    """`python -m tracking.ui --port 0` on the config's store; yields (its process, the links it printed).
    Stopped by its pid (SIGTERM: tracking.ui then stops its server's process group)."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    ui = subprocess.Popen([sys.executable, "-m", "tracking.ui", "--config", str(config_path), "--port", "0"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, start_new_session=True)
    try:
        # the links come once the server answers, one a line, then nothing until it stops: read until the
        # output has been quiet for 2 s after a link (tracking.ui gives up by itself if the server never answers)
        output = ""
        while select.select([ui.stdout], [], [], 2.0 if "http://" in output else None)[0]:
            chunk = os.read(ui.stdout.fileno(), 65536).decode()
            if not chunk:
                break
            output += chunk
        links = [line.strip() for line in output.splitlines() if line.startswith("http://")]
        if not links:
            raise RuntimeError(f"tracking.ui printed no link (exit status {ui.wait()})")
        yield ui, links
    finally:
        os.kill(ui.pid, signal.SIGTERM)
        ui.wait(timeout=60)


def render(link: str, screenshot: Path, width: int = 1600, height: int = 2000) -> str:
    """Open ``link`` in headless chromium once: save its screenshot (PNG) and return the rendered DOM
    (headless chromium runs both commands on one load). The virtual time budget lets the page's
    scripts fetch and draw the runs before the capture."""
    profile = tempfile.mkdtemp(prefix="ui_chromium_")
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--window-size={width},{height}",
               "--virtual-time-budget=30000", "--run-all-compositor-stages-before-draw",
               f"--screenshot={screenshot}", "--dump-dom", link]
    try:
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=180).stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def chart_card(dom: str, title: str) -> str:
    """The rendered DOM of the chart card titled ``title``: from its title to the next card's (or the
    page's end); "" when there is no such chart."""
    start = dom.find(f'title="{title}"')
    if start < 0:
        return ""
    end = dom.find("<h4 ", start + 1)
    return dom[start:end if end > 0 else len(dom)]


def visible_text(dom: str) -> str:
    """The rendered page's text (the DOM without its tags)."""
    return re.sub(r"<[^>]+>", " ", dom)
