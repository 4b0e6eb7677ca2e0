"""A real `mlflow server` for tests: started on 127.0.0.1 over a results folder exactly as `make ui`
starts it (tracking.ui: its command and environment, a port it takes itself), stopped by its process
group; REST helpers."""
import json
import os
import signal
import subprocess
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tracking.ui import server_command, server_env, wait_healthy


@contextmanager
def mlflow_server(results_dir: Path, log: Path):
    """Yields the server's base URL; its log goes to ``log`` (shown if it fails to start)."""
    env = {k: v for k, v in server_env().items() if k != "MLFLOW_TRACKING_URI"}
    with open(log, "w") as out:
        server = subprocess.Popen(server_command(results_dir, 0), stdout=out,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        try:
            base = wait_healthy(server, 0)
        except RuntimeError as error:
            raise AssertionError(f"{error}\n{Path(log).read_text()[-3000:]}") from None
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def rest(base: str, path: str, body: dict | None = None, raw: bool = False):
    """GET (or POST ``body``) ``path``; JSON decoded unless ``raw`` (then the bytes)."""
    if body is None:
        request = urllib.request.Request(base + path)
    else:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
    return data if raw else json.loads(data)


def run_params(run: dict) -> dict:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def run_tags(run: dict) -> dict:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}
