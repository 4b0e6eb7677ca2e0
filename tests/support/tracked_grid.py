"""A fabricated grid synced by tracking.sync's command line, and the runs it made: the MLflow tests' helpers
(tests/tracking/test_track.py, test_track_tuning.py)."""
import json

from grid.expand import grid_dir
from grid.folder import GridDir
from tests.support.grid_fixture import written_grid
from tracking.sync import main


def track(config):
    assert main(["--grid", written_grid(config)]) == 0
    return json.loads((grid_dir(config) / "mlflow.json").read_text())


def all_runs(client, experiment_id):
    return client.search_runs([experiment_id], max_results=1000)


def key_of(config, run):
    return json.loads((GridDir.of(config).run(*run).path / "config.json").read_text())["run_key"]
