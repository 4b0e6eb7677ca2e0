"""What a researcher sees: open the links `make ui` prints in headless Chromium and save screenshots.

    .venv/bin/python benchmarks/ui_screenshot.py --out /tmp/ui                 # a synced test grid
    .venv/bin/python benchmarks/ui_screenshot.py --config config.yaml --out ui # your grid's store

Without --config it syncs the reduced test grid into a temporary store (tests/support/ui_check.py, as
the suite's browser check, tests/tracking/test_track_ui.py, does). Then it starts tracking.ui on a free port and
runs Debian's chromium headless (installed with apt-get when absent) on each link it prints, and after the first
(the report) on the first collapsed run's samples table it links: a PNG <out>/page<N>.png of a --size window, each page's load time (chromium's wall time from start to the capture, with the
virtual time budget of tests/support/ui_check.render: the page's own work, its fetches and drawing), and
the rendered DOM, from which it reports whether the first page shows every claim of the grid by name.
Exit status 0 when it does, 1 when not, 2 when chromium cannot be installed.
"""
from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from grid.config import load  # noqa: E402
from grid.settings import Config  # noqa: E402
from tests.support.ui_check import CHROMIUM, render, running_ui, synced_grid, visible_text  # noqa: E402


def install_chromium() -> None:
    """Debian's chromium, installed with apt-get when absent; RuntimeError saying why it cannot be."""
    if Path(CHROMIUM).exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeError("chromium is not installed and there is no apt-get to install it") from None
        if result.returncode != 0:
            raise RuntimeError(f"cannot install chromium ({' '.join(command)}: {result.stderr.strip()[-300:]})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="a workflow config whose grid is synced (default: a fabricated test grid)")
    parser.add_argument("--out", default="ui", help="the folder of the screenshots (PNG)")
    parser.add_argument("--size", default="1440x900", help="the window, WIDTHxHEIGHT (default: a laptop's 1440x900)")
    args = parser.parse_args()
    try:
        install_chromium()
    except RuntimeError as error:
        print(f"ui_screenshot: {error}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ui_shot_") as tmp:
        config_path = Path(args.config) if args.config else synced_grid(Path(tmp))
        claims = [claim.name for claim in Config.build(load(config_path)).claims]
        doms, seconds = [], []
        width, height = (int(n) for n in args.size.split("x"))
        with running_ui(config_path) as (_, links):
            # and the first collapsed run's samples table, which the report page (the first) links
            for number, link in enumerate(links, 1):
                start = time.perf_counter()
                doms.append(render(link, out / f"page{number}.png", width, height))
                seconds.append(time.perf_counter() - start)
                samples = re.findall(r'href="(#/experiments/[^"]*/artifacts/samples.json)"', doms[0])
                if number == 1 and samples:
                    links.insert(1, link.partition("/#/")[0] + "/" + html.unescape(samples[0]))
    shown = all(name in visible_text(doms[0]) for name in claims)
    print("\n".join(f"page{number}.png: loaded in {took:.1f} s: {link}"
                    for number, (link, took) in enumerate(zip(links, seconds), 1)))
    print(f"screenshots in {out}\nthe {len(claims)} claims {claims} on the first page: {shown}")
    return 0 if shown else 1


if __name__ == "__main__":
    sys.exit(main())
