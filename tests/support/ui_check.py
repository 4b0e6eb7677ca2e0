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
    """The reduced test grid under ``folder`` with its claims and the collapsed run's samples, aggregated and synced;
    returns its config file."""
    from analysis.report.write import write_reports
    from grid.config import validate
    from grid.settings import Config
    from tests.support.grid_fixture import CLAIMS, make_grid, write_samples
    from tracking.sync import sync
    config = validate({**make_grid(folder / "results"), "claims": CLAIMS})
    write_samples(config)  # the collapsed run's sampled completions: the report links them
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


def _as_fds_3_and_4(commands: int, answers: int) -> None:
    """In the child, before it runs chromium: the pipe ends where --remote-debugging-pipe looks for them."""
    commands, answers = os.dup(commands), os.dup(answers)  # out of the way of 3 and 4 first
    os.dup2(commands, 3)
    os.dup2(answers, 4)


class Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages ended by
    a NUL byte, commands on its fd 3, answers on its fd 4), no client library: what a page lays out where, at a
    screen size, which --dump-dom cannot say. Use as a context manager; ``open`` a link, ``evaluate`` JavaScript."""

    def __init__(self, width: int = 1440, height: int = 900):
        self.width, self.height, self.next_id, self.buffer = width, height, 0, b""

    def __enter__(self) -> "Browser":
        self.profile = tempfile.mkdtemp(prefix="ui_chromium_")
        commands_read, self.commands = os.pipe()
        self.answers, answers_write = os.pipe()
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile}", f"--window-size={self.width},{self.height}"],
            pass_fds=(3, 4), preexec_fn=lambda: _as_fds_3_and_4(commands_read, answers_write),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(commands_read)
        os.close(answers_write)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.commands)
        self.process.terminate()
        self.process.wait(timeout=30)
        os.close(self.answers)
        shutil.rmtree(self.profile, ignore_errors=True)

    def send(self, method: str, session: str | None = None, timeout_s: float = 60, **params) -> dict:
        """One command's result (RuntimeError with the protocol's error)."""
        import json
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                if not select.select([self.answers], [], [], timeout_s)[0]:
                    raise RuntimeError(f"chromium did not answer {method} within {timeout_s} s")
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self.buffer += chunk
            raw, _, self.buffer = self.buffer.partition(b"\0")
            answer = json.loads(raw)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, link: str) -> str:
        """A new page at ``link`` in a viewport of the browser's size; its session."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", session, width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        self.send("Page.navigate", session, url=link)
        return session

    def evaluate(self, session: str, expression: str):
        """The value of a JavaScript expression in the page (JSON-serializable)."""
        return self.send("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, session: str, expression: str, timeout_s: float = 90):
        """The expression's value once truthy (the page's scripts fetch and draw first); None after ``timeout_s``."""
        import time
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(session, expression)
            if value:
                return value
            time.sleep(0.5)
        return None

    def screenshot(self, session: str, path: Path) -> None:
        """The viewport as a PNG (what a person sees without scrolling)."""
        import base64
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", session, format="png")["data"]))
