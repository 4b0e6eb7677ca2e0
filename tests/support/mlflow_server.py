"""A real `mlflow server` for tests: started on 127.0.0.1 (a free port) over a results folder exactly
as `make ui` starts it (tracking.ui.server_command), stopped by its process group; REST helpers."""
import json
import os
import signal
import socket
import subprocess
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tracking.ui import server_command, wait_healthy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def mlflow_server(results_dir: Path, log: Path):
    """Yields the server's base URL; its log goes to ``log`` (shown if it fails to start)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    with open(log, "w") as out:
        server = subprocess.Popen(server_command({"results_dir": str(results_dir)}, port), stdout=out,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, server)
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
