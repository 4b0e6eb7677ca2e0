"""The MLflow calls of a sync, in one place: experiments, runs found by their run_key tag or
created, batched logging within MLflow's limits, status moves, artifacts (tracking.store's layout).

A ``Writer`` is one pass's connection to the store; tracking.runs decides what each run gets.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

from harness.provenance import git_commit
from tracking.store import (
    KIND,
    SHARED_VIEW_TAG,
    create_local_store,
    fast_sqlite_commits,
    local_artifact_dir,
    tracking_uri,
)

KEY = "run_key"
MAX_METRICS, MAX_PARAMS, MAX_TAGS = 1000, 100, 100  # MLflow's log_batch limits


class Writer:
    """One pass into one MLflow store; counts the runs it created and updated."""

    def __init__(self, results_dir: Path):
        from mlflow.tracking import MlflowClient
        self.results_dir = results_dir
        self.uri, self.artifact_root = tracking_uri(results_dir)
        if self.uri.startswith("sqlite:"):
            create_local_store(self.uri)
            fast_sqlite_commits()
        self.client = MlflowClient(self.uri)
        self.now = int(time.time() * 1000)
        self.commit = git_commit() or "unknown"
        self.created = self.updated = 0

    def experiment(self, name: str, note: str) -> str:
        """The experiment ``name`` (created, or restored if deleted), with ``note`` as its description."""
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            location = None if self.artifact_root is None else f"{self.artifact_root}/{name.replace(' ', '_')}"
            experiment_id = self.client.create_experiment(name, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                self.client.restore_experiment(experiment_id)
        self.describe(experiment_id, note)
        return experiment_id

    def describe(self, experiment_id: str, note: str) -> None:
        """``note`` (Markdown) as the experiment's description, which the UI shows on its page."""
        self.client.set_experiment_tag(experiment_id, "mlflow.note.content", note)

    def share_view(self, experiment_id: str, key: str, view: dict) -> None:
        """Store ``view`` as the experiment's shared view ``key``: the state the UI's Share button saves
        (plain JSON, which the UI reads as well as its compressed form), opened by ?viewStateShareKey=key."""
        self.client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + key, json.dumps(view))

    def existing(self, experiment_id: str) -> dict:
        """Every active run of the experiment, once, keyed by its run_key tag."""
        from mlflow.entities import ViewType
        existing, token = {}, None
        while True:
            page = self.client.search_runs([experiment_id], run_view_type=ViewType.ACTIVE_ONLY,
                                           max_results=5000, page_token=token)
            for run in page:
                existing.setdefault(run.data.tags.get(KEY), run)
            token = page.token
            if not token:
                return existing

    def run(self, key: str, kind: str, name: str, tags: dict, experiment_id: str, existing: dict,
            start_ms: int | None = None):
        """The run with this key among ``existing`` (the experiment's runs): found (updated) or
        created (new). Returns (run_id, existing Run|None)."""
        found = existing.get(key)
        if found is not None:
            self.updated += 1
            return found.info.run_id, found
        run = self.client.create_run(experiment_id, start_time=start_ms or self.now, run_name=name,
                                     tags={KEY: key, KIND: kind, "mlflow.source.git.commit": self.commit, **tags})
        self.created += 1
        return run.info.run_id, None

    def log(self, run_id: str, metrics=(), params: dict | None = None, tags: dict | None = None) -> None:
        """log_batch in chunks within MLflow's limits (<= 1000 entries, 100 params, 100 tags per call).
        Metrics go first, params and tags with the last of them: the tags record what was sent (the
        last step synced, a curve's digest: tracking.runs), so a sync killed between two batches has
        not recorded the points it never sent, and the next sync sends them (a point sent twice is
        one point: the SQL store drops a repeated (key, step, timestamp, value))."""
        from mlflow.entities import Param, RunTag
        metrics = list(metrics)
        params = [Param(k, v) for k, v in (params or {}).items()]
        tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        while metrics or params or tags:
            batch_metrics, metrics = metrics[:MAX_METRICS], metrics[MAX_METRICS:]
            batch_params, batch_tags = [], []
            if not metrics:
                room = MAX_METRICS - len(batch_metrics)
                batch_params, params = params[:min(MAX_PARAMS, room)], params[min(MAX_PARAMS, room):]
                room -= len(batch_params)
                batch_tags, tags = tags[:min(MAX_TAGS, room)], tags[min(MAX_TAGS, room):]
            self.client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)

    def changed(self, found, values: dict[str, float | None]):
        """Step-0 metrics whose value differs from the run's latest (all of them for a new run)."""
        from mlflow.entities import Metric
        latest = found.data.metrics if found is not None else {}
        out = []
        for key, value in values.items():
            if value is None:
                continue
            old = latest.get(key)
            if old is None or not (old == value or (math.isnan(old) and math.isnan(value))):
                out.append(Metric(key, value, self.now, 0))
        return out

    def set_status(self, run_id: str, found, status: str, end_ms: int | None = None) -> None:
        """Move the run to ``status`` (RUNNING, FINISHED or FAILED) unless it is there already."""
        if found is not None and found.info.status == status:
            return
        if status == "RUNNING":
            if found is not None:
                self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status, end_time=end_ms)

    def log_artifacts(self, run_id: str, paths: list[Path], folder: str | None = None) -> None:
        """Same artifact paths each sync: overwrites; ``folder``: under that artifact folder. A local store's
        proxied artifacts go straight into the folder its UI server serves them from (tracking.store)."""
        local = local_artifact_dir(self.results_dir, self.client.get_run(run_id).info.artifact_uri)
        if local is not None:
            from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
            repository = LocalArtifactRepository(str(local))
        for path in paths:
            if local is None:
                self.client.log_artifact(run_id, str(path), folder)
            else:
                repository.log_artifact(str(path), folder)

    def log_table(self, run_id: str, rows: list[dict], name: str) -> None:
        """``rows`` as the run's table artifact ``name`` (.json), in the form MlflowClient.log_table writes (pandas'
        orient "split": columns, data; the tag mlflow.loggedArtifacts lists it as a table, which the UI's artifact
        view draws as one), replaced, not appended to (log_table appends to an existing table: a re-sync would repeat
        every row), and written where log_artifacts writes (log_table's own upload needs the server)."""
        columns = list(dict.fromkeys(key for row in rows for key in row))
        with tempfile.TemporaryDirectory(prefix="track_table_") as tmp:
            path = Path(tmp) / name
            path.write_text(json.dumps({"columns": columns, "data": [[row.get(c) for c in columns] for row in rows]}))
            self.log_artifacts(run_id, [path])
        self.log(run_id, tags={"mlflow.loggedArtifacts": json.dumps([{"path": name, "type": "table"}])})

    def log_images(self, run_id: str, images: list[tuple[str, Path]]) -> list[str]:
        """PNG files as the run's images, each under its key at step 0, as MlflowClient.log_image stores them (the
        UI's image charts read them: images/<key, / as ~>+step+0+timestamp+<ms>+<id>.png and a +compressed.webp, the
        tag mlflow.loggedImages), under names fixed by the key, so that a re-sync overwrites them. The card draws the
        webp: here the image at its own size (lossless), not log_image's 256 px thumbnail, whose axis text a card
        shrinks to ~5 px or blurs up (issue 65). Returns each image's artifact path (its PNG), in order."""
        import PIL.Image
        with tempfile.TemporaryDirectory(prefix="track_images_") as tmp:
            written = []
            for key, png in images:
                name = f"{key.replace('/', '~')}+step+0+timestamp+0+{hashlib.sha256(key.encode()).hexdigest()[:32]}"
                shutil.copyfile(png, Path(tmp) / f"{name}.png")
                with PIL.Image.open(png) as image:
                    image.save(Path(tmp) / f"{name}+compressed.webp", lossless=True)
                written += [Path(tmp) / f"{name}.png", Path(tmp) / f"{name}+compressed.webp"]
            self.log_artifacts(run_id, written, "images")
        self.log(run_id, tags={"mlflow.loggedImages": "true"})
        return [f"images/{path.name}" for path in written[::2]]
