"""What a researcher sees: open the link `make ui` prints in headless Chromium and save a screenshot.

    .venv/bin/python benchmarks/ui_screenshot.py --out /tmp/ui.png                 # a synced test grid
    .venv/bin/python benchmarks/ui_screenshot.py --config config.yaml --out ui.png # your grid's store

Without --config it fabricates the reduced test grid (tests/support/grid_fixture.py), aggregates and syncs
it into a temporary store. Then it starts tracking.ui on a free port, reads the link it prints, and
runs Debian's chromium headless on it (installed with apt-get when absent): a PNG of the page, and
the rendered DOM, from which it reports whether the test-score chart (eval/<test task>/score) is on
the page. Exit status 0 when it is, 1 when not, 2 when chromium cannot be installed.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from analysis.curves import test_task  # noqa: E402
from harness.config import load  # noqa: E402


def chromium() -> str:
    """Debian's chromium, installed with apt-get when absent; RuntimeError saying why it cannot be."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise RuntimeError("chromium is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"cannot install chromium ({' '.join(command)}: {result.stderr.strip()[-300:]})")
    return shutil.which("chromium") or "chromium"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fabricate(folder: Path) -> Path:
    """The reduced test grid, aggregated and synced; returns its config file."""
    from analysis.report import write_reports
    from harness.grid import grid_dir
    from tests.support.grid_fixture import make_grid
    from tracking.sync import sync
    config = make_grid(folder / "results")
    write_reports(config, grid_dir(config), progress=False)
    sync(config, progress=False)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def shoot(config_path: Path, out: Path, width: int = 1600, height: int = 2000) -> tuple[str, str]:
    """Start tracking.ui, open its link in headless chromium; returns (link, rendered DOM)."""
    browser = chromium()
    port = free_port()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    ui = subprocess.Popen([sys.executable, "-m", "tracking.ui", "--config", str(config_path), "--port", str(port)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        link = ""
        for line in ui.stdout:  # the UI prints its link once the server answers
            if line.startswith("http://"):
                link = line.strip()
                break
        if not link:
            raise RuntimeError(f"tracking.ui printed no link (exit status {ui.wait()})")
        profile = tempfile.mkdtemp(prefix="ui_chromium_")
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  f"--user-data-dir={profile}", f"--window-size={width},{height}",
                  "--virtual-time-budget=30000", "--run-all-compositor-stages-before-draw"]
        subprocess.run(common + [f"--screenshot={out}", link], check=True, capture_output=True, timeout=180)
        dom = subprocess.run(common + ["--dump-dom", link], check=True, capture_output=True, text=True,
                             timeout=180).stdout
        shutil.rmtree(profile, ignore_errors=True)
        return link, dom
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=30)


def visible_text(dom: str) -> str:
    """The rendered page's text (the DOM without its tags)."""
    return re.sub(r"<[^>]+>", " ", dom)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="a workflow config whose grid is synced (default: a fabricated test grid)")
    parser.add_argument("--out", default="ui.png", help="the screenshot (PNG)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui_shot_") as tmp:
        config_path = Path(args.config) if args.config else fabricate(Path(tmp))
        chart = f"eval/{test_task(load(config_path)['eval'])}/score"
        try:
            link, dom = shoot(config_path, Path(args.out).resolve())
        except RuntimeError as error:
            print(f"ui_screenshot: {error}", file=sys.stderr)
            return 2
    shown = chart in visible_text(dom)
    print(f"link: {link}\nscreenshot: {Path(args.out).resolve()}\nchart {chart!r} on the page: {shown}")
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
