"""The loss that ran is the loss configured: each train job records its recipe's fingerprint on the
canned batch (engines.train), and aggregate refuses a run whose fingerprint is not its recipe's."""
from __future__ import annotations

import json
import time

import pytest

import stabilizers.api
from analysis.aggregate import main as aggregate
from engines.train import run
from grid.expand import resolved_recipe
from grid.folder import GridDir
from harness import engine as engines
from harness.io import read_json
from harness.run import RunDir
from harness.run_config import recipe_fingerprint
from stabilizers import fingerprint, get, get_recipe, load_recipes
from tests.support.grid_fixture import make_grid, written_grid

TOY = "fingerprint_toy"


def _toy_train(run_config, run_dir) -> str:
    run_dir.write_status("completed", run_config.steps, "toy engine: nothing trained")
    return "completed"


@pytest.fixture(scope="module", autouse=True)
def toy_engine():
    engines.register(engines.Engine(name=TOY, resolve_params=dict, train=_toy_train, eval_backend="tiny"))


def toy_run_config(recipe: str = "grpo") -> dict:
    return {"grid": "g", "engine": TOY, "recipe": resolved_recipe(get_recipe(recipe, load_recipes())), "lag": 1,
            "lag_mode": "interval", "seed": 0, "steps": 2, "eval_every": 1, "engine_params": {}}


def plant_grpo_running_gspo(patch: pytest.MonkeyPatch) -> None:
    """The planted fault: the module registered as grpo runs GSPO's loss (taking grpo's parameters)."""
    get("grpo")  # loaded first, so that the registry's scan does not replace the patch
    gspo = get("gspo")
    patch.setitem(stabilizers.api._REGISTRY, "grpo", lambda batch, **params: gspo(batch))


def test_the_train_job_records_the_fingerprint_of_its_recipe(tmp_path):
    folder = tmp_path / "g" / "runs" / "grpo" / "lag1" / "seed0"
    assert run(toy_run_config(), folder) == "completed"
    recorded = read_json(RunDir(folder).fingerprint_path)
    assert recorded == fingerprint(get_recipe("grpo", load_recipes()))
    assert recorded != fingerprint(get_recipe("gspo", load_recipes()))
    RunDir(folder).check_fingerprint()  # config.json's recipe, computed fresh: the same


def test_a_run_that_started_with_another_loss_is_not_resumed(tmp_path, monkeypatch):
    folder = tmp_path / "g" / "runs" / "grpo" / "lag1" / "seed0"
    RunDir(folder).write_fingerprint(fingerprint(get_recipe("grpo", load_recipes())))  # its first attempt
    plant_grpo_running_gspo(monkeypatch)  # then its module changed
    with pytest.raises(ValueError, match="started with another loss"):
        run(toy_run_config(), folder)
    assert not RunDir(folder).status_path.exists()


def test_aggregate_refuses_a_run_whose_module_ran_another_loss(tmp_path, monkeypatch, capsys):
    config = make_grid(tmp_path)
    victim = GridDir.of(config).run("grpo", 1, 0)
    with monkeypatch.context() as patch:  # the train job's process: its grpo module runs GSPO's loss
        plant_grpo_running_gspo(patch)
        planted = fingerprint(get_recipe("grpo", load_recipes()))
    victim.write_fingerprint(planted)
    expected = recipe_fingerprint(json.dumps(victim.read_config()["recipe"], sort_keys=True))
    assert planted["digest"] != expected["digest"]
    grid = tmp_path / "demo"
    assert aggregate(["--grid", written_grid(config)]) == 2
    error = capsys.readouterr().err
    assert str(victim.path) in error and planted["digest"] in error and expected["digest"] in error
    assert not (grid / "summary.json").exists()


def test_aggregate_refuses_a_run_without_a_fingerprint(tmp_path, capsys):
    config = make_grid(tmp_path)
    victim = GridDir.of(config).run("sat_grpo", 8, 2)
    victim.fingerprint_path.unlink()
    assert aggregate(["--grid", written_grid(config)]) == 2
    assert f"{victim.fingerprint_path} is missing" in capsys.readouterr().err


def test_the_fingerprint_check_costs_one_computation_per_recipe(tmp_path):
    config = make_grid(tmp_path)  # 3 recipes x 2 lags x 3 seeds
    recipe_fingerprint.cache_clear()
    start = time.perf_counter()
    for recipe, lag, seed in [(r, lag, s) for r in config["recipes"] for lag in config["lags"] for s in config["seeds"]]:
        GridDir.of(config).run(recipe, lag, seed).check_fingerprint()
    seconds = time.perf_counter() - start
    assert recipe_fingerprint.cache_info().misses == len(config["recipes"])
    print(f"fingerprint check of {len(config['recipes']) * 6} runs: {seconds:.2f} s")
