"""`make ui` (tracking.ui): the server it starts, the link it prints, and — on demand — what a real
headless browser shows at that link (benchmarks/ui_screenshot.py)."""
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.grid_fixture import make_grid
from tests.support.optional import missing
from tests.support.ports import free_ports
from tracking.sync import sync

ROOT = Path(__file__).resolve().parents[1]


def start_ui(config: Path, env: dict, log: Path, attempts: int = 3):
    """`python -m tracking.ui` on a free port: (process, port, the link it printed). Started again on
    another port where its server found the port taken meanwhile."""
    for attempt in range(1, attempts + 1):
        (port,) = free_ports(1)
        with open(log, "w") as errors:
            ui = subprocess.Popen([sys.executable, "-m", "tracking.ui", "--config", str(config), "--port", str(port)],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=errors, text=True,
                                  start_new_session=True)
        link = next((line.strip() for line in ui.stdout if line.startswith("http://")), "")
        if link or attempt == attempts or "address already in use" not in log.read_text().lower():
            assert link, f"tracking.ui printed no link (exit {ui.wait()}):\n{log.read_text()[-3000:]}"
            return ui, port, link
        ui.wait()


def test_ui_serves_the_store_and_prints_the_runs_view_link(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = make_grid(tmp_path / "results")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    marker = sync(config, progress=False, final=False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    ui, port, link = start_ui(tmp_path / "config.yaml", env, tmp_path / "ui.log")
    try:
        base, _, fragment = link.partition("/#/")
        assert base == f"http://127.0.0.1:{port}" and fragment.startswith(f"experiments/{marker['experiment_id']}/runs?")
        query = urllib.parse.parse_qs(fragment.partition("?")[2])
        assert query["workflowType"] == ["machine_learning"] and query["compareRunsMode"] == ["CHART"]
        assert query["searchFilter"] == ["tags.\"stalebench.kind\" = 'run'"]
        found = json.loads(urllib.request.urlopen(
            f"{base}/api/2.0/mlflow/experiments/get?experiment_id={marker['experiment_id']}", timeout=30).read())
        assert found["experiment"]["name"] == config["grid"]
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # tracking.ui stops the server's own process group
        ui.wait(timeout=60)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


@pytest.mark.skipif(os.environ.get("STALEBENCH_UI_CHECK") != "1",
                    reason="headless-browser check on demand: STALEBENCH_UI_CHECK=1 (installs Debian's chromium "
                           "with apt-get when absent; ~2-5 min)")
def test_printed_link_shows_the_seed_runs_test_score_chart(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ui_screenshot
    try:
        ui_screenshot.chromium()
    except RuntimeError as error:
        missing("browser", f"no headless browser: {error}")
    link, dom = ui_screenshot.shoot(ui_screenshot.fabricate(tmp_path), tmp_path / "ui.png")
    text = ui_screenshot.visible_text(dom)
    assert "eval/tiny_test/score" in text and "grpo/lag1/seed0" in text, link
    assert (tmp_path / "ui.png").stat().st_size > 10_000
