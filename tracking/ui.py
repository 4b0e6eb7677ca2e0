"""Open the MLflow UI on a grid's store at its runs view (``make ui``).

    python -m tracking.ui [--config config.yaml] [--grid NAME] [--port 5000]   # --port 0: a free port

Starts ``mlflow server`` on 127.0.0.1 over <results_dir>/mlflow.db, serving the artifacts from
<results_dir>/mlartifacts (wherever results/ now lives: the store is relocatable, tracking.store),
waits until it answers, prints its links and runs until Ctrl-C, first what the grid was run to answer: the
grid's parent run at its claims table (tracking.store.parent_link); a cell comparison per lag (the "<grid>
comparison" experiment as charts in the views tracking.sync shares on it: a line per recipe over its 95% band,
the staleness-cost bars; tracking.store.comparison_link); then the grid's seed runs per lag as charts, grouped by
recipe (tracking.layout.seed_runs_view: each recipe in its colour of the comparison, every run drawn), after the training dynamics per lag (tracking.layout.dynamics_view). The server logs warnings and errors only (no access log: a line per request scrolled the links away).
The server runs without MLflow's job runner (its huey workers serve GenAI jobs this harness never
submits; with them the UI's processes took 2.7 GB instead of 0.75, docs/mlflow.md):
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true in the environment turns it back on. The links are read from the
store in a child process (child_links): this process, which then only waits on the server, holds no MLflow
client (282 MiB resident with one, docs/mlflow.md).
If $MLFLOW_TRACKING_URI names a server, prints that server's link instead and starts nothing.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from grid.config import ConfigError, load
from grid.settings import Config
from tracking.store import (
    COMPARISON_SUFFIX,
    COMPARISON_VIEW,
    DYNAMICS_VIEW,
    SEED_RUNS_VIEW,
    SHARED_VIEW_TAG,
    TUNING_SUFFIX,
    artifact_destination,
    check_reachable,
    comparison_link,
    dynamics_link,
    intervals_link,
    local_store,
    parent_link,
    store_lock,
    tracking_uri,
    ui_link,
)
from tracking.writer import KEY

HOST = "127.0.0.1"


def experiment_id(uri: str, name: str) -> str | None:
    from mlflow.tracking import MlflowClient
    experiment = MlflowClient(uri).get_experiment_by_name(name)
    return None if experiment is None else experiment.experiment_id


def parent_run_id(uri: str, experiment: str, grid: str) -> str | None:
    """The grid's parent run (its run_key tag, tracking.runs), None before the first sync made it."""
    from mlflow.tracking import MlflowClient
    found = MlflowClient(uri).search_runs([experiment], filter_string=f"tags.{KEY} = 'grid:{grid}'", max_results=1)
    return found[0].info.run_id if found else None


def viewed_lags(uri: str, experiment: str, view: str) -> list[int]:
    """The lags of the shared views ``view`` (a name with {lag}) the sync stored on ``experiment``: the comparison's,
    those of the grid as aggregated (a narrowed run of the workflow may have fewer than the config file names);
    the seed runs', the config's."""
    from mlflow.tracking import MlflowClient
    prefix = SHARED_VIEW_TAG + view.format(lag="")
    tags = MlflowClient(uri).get_experiment(experiment).tags
    return sorted(int(key[len(prefix):]) for key in tags if key.startswith(prefix) and key[len(prefix):].isdigit())


def links(base_url: str, uri: str, grid: str) -> str:
    """The links of ``grid``, what a person looks for first at the top: once the grid is aggregated and synced,
    the claims' verdicts (the parent run) and a cell comparison per lag; then the seed runs (and a tuning grid's
    candidates)."""
    seeds = experiment_id(uri, grid)
    if seeds is None:
        raise ValueError(f"no experiment {grid!r} in {uri}: run the grid (make demo) or tracking.sync first")
    lines = []
    cells = experiment_id(uri, grid + COMPARISON_SUFFIX)
    if cells is None:
        lines.append("Claims' verdicts and cell comparison: none yet (the grid is not aggregated and synced)")
    else:
        lines += ["Claims, the report (outcome, estimate and interval, P(a rerun agrees); every view and the collapsed "
                  "runs' samples one click away; table.md and the plots beside it):", parent_link(base_url, seeds, parent_run_id(uri, seeds, grid)),
                  "Intervals (each claim's contrast, each recipe's staleness cost per lag; 95% or the claim's level):",
                  intervals_link(base_url, cells)]
        for lag in viewed_lags(uri, cells, COMPARISON_VIEW):
            lines += [f"Cell comparison at lag {lag} (a line per recipe, the mean test score over its 95% band):",
                      comparison_link(base_url, cells, lag)]
    for lag in viewed_lags(uri, seeds, DYNAMICS_VIEW):
        lines += [f"Training dynamics at lag {lag} (clip fraction, ratio spread, entropy, reward, off-policy "
                  "diagnostics, response length: per recipe its seeds' mean over their min-max band):", dynamics_link(base_url, seeds, lag)]
    for lag in viewed_lags(uri, seeds, SEED_RUNS_VIEW):
        lines += [f"Seed runs at lag {lag} (a line per recipe, the mean of its seeds over their min-max band):",
                  ui_link(base_url, seeds, lag)]
    tuning = experiment_id(uri, grid + TUNING_SUFFIX)
    if tuning is not None:  # a grid with a tuning section (tracking.runs): its candidates, kept apart
        lines += ["Tuning candidates (the tuning seeds: how each value was picked, never a result):",
                  f"{base_url}/#/experiments/{tuning}"]  # its default runs view: the sync stores no view there
    return "\n".join(lines)


ROOT = Path(__file__).resolve().parents[1]
LINKS_CHILD = ("import sys\nfrom tracking.ui import links\ntry:\n    print(links(*sys.argv[1:]))\n"
               "except ValueError as error:\n    sys.exit(str(error))")


def child_links(base_url: str, uri: str, grid: str) -> str:
    """links() computed in a child process: MLflow's client (about 250 MiB resident once it has queried the
    store) is not kept by this process while it waits on the server. ValueError naming what is missing."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    found = subprocess.run([sys.executable, "-c", LINKS_CHILD, base_url, uri, grid], capture_output=True, text=True,
                           env=env)
    if found.returncode != 0:
        raise ValueError(found.stderr.strip().splitlines()[-1] if found.stderr.strip() else f"exit {found.returncode}")
    return found.stdout.rstrip("\n")


def server_command(results_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri(results_dir)[0],
            "--artifacts-destination", str(artifact_destination(results_dir)), "--serve-artifacts",
            "--host", HOST, "--port", str(port), "--workers", "1",
            # no line per request (hundreds in a session, scrolling the links away): warnings and errors only
            "--uvicorn-opts", "--no-access-log --log-level warning"]


def server_env() -> dict[str, str]:
    """The server's environment: no telemetry and no job runner, unless the caller's environment says otherwise."""
    return {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "PYTHONWARNINGS": "ignore", **os.environ}  # MLflow's imports warn of its own dependencies


def listening_port(process: subprocess.Popen) -> int | None:
    """The TCP port the server's process tree listens on (the uvicorn child opens it); None before it does."""
    tree = psutil.Process(process.pid)
    for member in [tree] + tree.children(recursive=True):
        try:
            ports = [c.laddr.port for c in member.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
        if ports:
            return ports[0]
    return None


def wait_healthy(process: subprocess.Popen, port: int, timeout_s: float = 120) -> str:
    """The base URL of the server once it answers; ``port`` 0: the one it took."""
    deadline = time.monotonic() + timeout_s
    while True:
        bound = port or listening_port(process)
        try:
            if bound:
                urllib.request.urlopen(f"http://{HOST}:{bound}/health", timeout=2)
                return f"http://{HOST}:{bound}"
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with status {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"mlflow server did not answer on {HOST}:{port or 'its port'} within {timeout_s:.0f} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracking.ui", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="config.yaml", help="workflow config naming the grid and results_dir")
    parser.add_argument("--grid", help="the grid's name (default: the config's), e.g. after snakemake -C grid=NAME")
    parser.add_argument("--port", type=int, default=5000, help="0: a free port, which the link names")
    args = parser.parse_args(argv)
    try:
        config = Config.build(load(args.config, {"grid": args.grid} if args.grid else None))
    except ConfigError as error:
        parser.error(str(error))
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = tracking_uri(config.results_dir)[0]
    if not uri.startswith("sqlite:"):
        try:
            check_reachable(uri)
        except ConnectionError as error:
            parser.error(str(error))
        print(links(uri, uri, config.grid), flush=True)
        return 0
    if not local_store(config.results_dir).exists():
        parser.error(f"no MLflow store at {local_store(config.results_dir)}: run the grid (make demo) first")
    # SIGTERM (e.g. from a test) goes through the finally below, which stops the server's process group
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    process = None
    try:
        # MLflow completes a store it opens (tables, its Default experiment): this client and the
        # starting server are writers of the store until the server answers (tracking.store)
        with store_lock(uri, f"MLflow UI of grid {config.grid}, starting"):
            child_links(HOST, uri, config.grid)  # refuses a store without the grid before a server starts
            process = subprocess.Popen(server_command(config.results_dir, args.port), env=server_env(),
                                       start_new_session=True)
            base = wait_healthy(process, args.port)
        print(f"MLflow UI of grid {config.grid!r} (Ctrl-C stops it).\n{child_links(base, uri, config.grid)}",
              flush=True)
        return process.wait()
    except KeyboardInterrupt:
        return 0
    except (RuntimeError, ValueError) as error:
        print(f"tracking.ui: error: {error}", file=sys.stderr)
        return 1
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
