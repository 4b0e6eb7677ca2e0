"""Where the MLflow store lives, how it stays relocatable, the store's lock and the UI links.

Default store: ``sqlite:///<results_dir>/mlflow.db`` with artifacts under ``<results_dir>/mlartifacts``.
The experiments of that store record their artifact location as ``mlflow-artifacts:/<experiment>``,
a path relative to whatever artifact root the UI server is started with (``--artifacts-destination
<results_dir>/mlartifacts``, see tracking.ui): no absolute path of this machine is written in the
store, so ``results/`` can be moved or copied to another machine and still lists and opens every
artifact. The writer (tracking.sync) puts artifacts straight into that folder, the place the server
later reads them from. If $MLFLOW_TRACKING_URI names a server, both runs and artifacts go there.

One writer of a local store at a time: two grids in one results folder share its mlflow.db, and two
processes creating a new store's schema at once fail (MLflow migrates it table by table:
``table _alembic_tmp_experiments already exists``). Every writer (tracking.sync's final and live
passes, tracking.ui while its server starts) holds ``store_lock``, waiting its turn; a new store is
built beside its path and renamed into place, so a writer killed while creating it leaves no
half-made store. A server (or a database server's URI) has no such lock: the server owns its store,
migrates it once when it starts and serializes its clients' writes; a lock file here could not reach
writers on other machines anyway.
"""
from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from harness.lock import writer_lock

PROXIED = "mlflow-artifacts:"
KIND = "stalebench.kind"  # a run's kind: parent | run | cell | drawn (a comparison's line or band) | figure (intervals)
SEED_RUNS_FILTER = f"tags.\"{KIND}\" = 'run'"
SEED_RUNS_VIEW = "stalebench-seeds-lag{lag}"  # the seed runs' experiment's shared view of one lag (ui_link)
DYNAMICS_VIEW = "stalebench-dynamics-lag{lag}"  # the seed runs' experiment's training dynamics at one lag
COMPARISON_VIEW = "stalebench-cells-lag{lag}"  # the comparison experiment's shared view of one lag (comparison_link)
INTERVALS_VIEW = "stalebench-intervals"  # the comparison experiment's view of the intervals' charts (intervals_link)
VERDICTS_ARTIFACT = "verdicts.md"  # the parent run's claims table (parent_link)
SUMMARY_SUFFIX = " summary"  # the summary runs' experiment: "<grid> summary" (tracking.runs)
COMPARISON_SUFFIX = " comparison"  # what the comparison views draw, never a result: "<grid> comparison"
TUNING_SUFFIX = " tuning"  # the tuning candidates' experiment: "<grid> tuning"
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # + key: an experiment tag the UI opens with ?viewStateShareKey=key


def local_store(results_dir: Path) -> Path:
    """The default store's file: <results_dir>/mlflow.db, shared by every grid of that folder."""
    return Path(results_dir).resolve() / "mlflow.db"


def tracking_uri(results_dir: Path) -> tuple[str, str | None]:
    """(tracking URI, artifact root of a new experiment: None = the server's default, else the
    proxied root under which ``<experiment>/<run id>/artifacts`` resolve)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    return f"sqlite:///{local_store(results_dir)}", PROXIED


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """A tracking server's URI (http, https) that does not answer within ``timeout_s`` raises
    ConnectionError naming it, before a writer takes a lock or touches a file: MLflow's own client would
    retry for minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES, its backoff) before naming the address. Any HTTP
    answer, an error status included, is a server there; a local store has nothing to reach."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise ConnectionError(f"the MLflow tracking server {uri} ($MLFLOW_TRACKING_URI) does not answer within "
                              f"{timeout_s:.0f} s ({reason}): start it, or unset MLFLOW_TRACKING_URI to write the "
                              "local store under results_dir; nothing was written") from None


def artifact_destination(results_dir: Path) -> Path:
    """The folder a local store's ``mlflow-artifacts:/`` URIs resolve to (the UI server's
    ``--artifacts-destination``)."""
    return Path(results_dir).resolve() / "mlartifacts"


def local_artifact_dir(results_dir: Path, artifact_uri: str) -> Path | None:
    """The folder of a run whose artifact URI is proxied (``mlflow-artifacts:/<exp>/<run>/artifacts``)
    in the local store; None when the artifacts go through a tracking server."""
    if os.environ.get("MLFLOW_TRACKING_URI") or not artifact_uri.startswith(PROXIED):
        return None
    return artifact_destination(results_dir) / artifact_uri[len(PROXIED):].lstrip("/")


def store_lock(uri: str, purpose: str):
    """The lock of the store ``uri`` (the module's docstring): <store>.lock beside a sqlite store,
    waited for as long as another writer holds it; none for a server."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    return writer_lock(uri.removeprefix("sqlite:///") + ".lock", purpose, wait_s=math.inf)


def create_local_store(uri: str) -> None:
    """Create a new sqlite store as the UI server would (the default artifact root proxied): MLflow's
    Default experiment then records ``mlflow-artifacts:/0``, where MlflowClient would have written the
    absolute path of the writer's ./mlruns. Built under another name and renamed: a store's path
    never holds a half-migrated schema. The caller holds ``store_lock``."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    path = Path(uri.removeprefix("sqlite:///"))
    if path.exists():
        return
    building = path.with_name(f".{path.name}.creating")
    building.unlink(missing_ok=True)  # left by a writer killed while creating the store
    SqlAlchemyStore(f"sqlite:///{building}", f"{PROXIED}/").engine.dispose()
    os.replace(building, path)


_PRAGMA_SET = False


def fast_sqlite_commits() -> None:
    """PRAGMA synchronous=OFF on every sqlite connection of this process: each commit would
    otherwise wait for an fsync (about 13 ms here, two per call), and the store is rebuildable
    from the files if an OS crash ever corrupted it."""
    global _PRAGMA_SET
    if _PRAGMA_SET:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _no_fsync(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA synchronous=OFF")

    _PRAGMA_SET = True


def page_link(base_url: str, route: str) -> str:
    """The UI's page at ``route`` (its hash route, "experiments/..."): under ``base_url``, or with base_url "" a link
    relative to the page that holds it (``#/route``: a report or description rendered by the UI, which keeps the
    server's address and any path prefix a proxy serves it under, where ``/#/`` would drop the prefix)."""
    return f"{base_url.rstrip('/')}/#/{route}" if base_url else f"#/{route}"


def _view_link(base_url: str, experiment_id: str, view_key: str) -> str:
    """The experiment's runs as charts in the shared view ``view_key`` (an experiment tag the sync
    stores). MLflow 3 opens its GenAI traces page unless the link names the classic ("machine learning")
    workflow; the UI reads a shared view only from a link without search keys (searchFilter,
    orderByKey...): the view holds them."""
    query = urllib.parse.urlencode({"workflowType": "machine_learning", "compareRunsMode": "CHART",
                                    "viewStateShareKey": view_key})
    return page_link(base_url, f"experiments/{experiment_id}/runs?{query}")


def ui_link(base_url: str, experiment_id: str, lag: int) -> str:
    """The grid's seed runs at one lag, as charts (layout.seed_runs_view: grouped by recipe, listed by name, every
    one drawn; by name because the runs view folds child runs under their parent while sorted by creation time)."""
    return _view_link(base_url, experiment_id, SEED_RUNS_VIEW.format(lag=lag))


def dynamics_link(base_url: str, experiment_id: str, lag: int) -> str:
    """The training dynamics of the grid's seed runs at one lag (layout.dynamics_view: a chart per metric, a line per
    recipe over its seeds' band)."""
    return _view_link(base_url, experiment_id, DYNAMICS_VIEW.format(lag=lag))


def comparison_link(base_url: str, comparison_experiment_id: str, lag: int) -> str:
    """The cell comparison at one lag: the comparison experiment's runs as charts (layout.comparison_view:
    a line per recipe over its 95% band, the staleness-cost bars)."""
    return _view_link(base_url, comparison_experiment_id, COMPARISON_VIEW.format(lag=lag))


def intervals_link(base_url: str, comparison_experiment_id: str) -> str:
    """The intervals' charts (layout.intervals_view): each recipe's staleness cost per lag and each claim's contrast,
    with their intervals, the categories named on the axis (images drawn by analysis.report.interval_plots)."""
    return _view_link(base_url, comparison_experiment_id, INTERVALS_VIEW)


def parent_link(base_url: str, experiment_id: str, parent_run_id: str) -> str:
    """The grid's parent run at its verdicts table (an artifact, rendered by the UI as Markdown: every
    claim's name and verdict in full, where the run's tag chips cut long names); its other artifacts
    (table.md, the plots) one click away in the same tree."""
    return page_link(base_url, f"experiments/{experiment_id}/runs/{parent_run_id}/artifacts/{VERDICTS_ARTIFACT}")
