"""Run and eval keys cover the resolved run: a value hidden behind a preset or a default is in the key;
the config model gives each stage only what it reads; provenance is recorded per attempt."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from engines.tiny import params as tiny_params
from grid import expand as grid_expand
from grid.config import load, schema, validate
from grid.expand import refuse_changed_runs, resolve_run_config
from grid.folder import GridDir
from grid.settings import Config
from harness import engine as engines
from harness.identity import eval_key, run_key
from harness.lag import LAG_MODES
from harness.provenance import collect, finish_attempt, start_attempt
from harness.run import RunDir
from harness.run_config import BASE_MODEL, RunConfig
from stabilizers import parameters
from tests.support.grid_fixture import DIVERGE_STEP, STEPS, make_grid
from tests.support.workflow_cli import snakemake

DEMO = yaml.safe_load(open("tests/support/interval_grid.yaml"))


def key_of(**changes) -> str:
    config = validate({**copy.deepcopy(DEMO), **changes})
    return resolve_run_config(config, "grpo", 1, 0)["run_key"]


def test_the_run_config_spells_out_the_preset_and_every_stabilizer_default():
    run = resolve_run_config(load("tests/support/interval_grid.yaml"), "grpo_mu", 8, 2)
    assert run["engine_params"] == tiny_params.resolve_engine_params({"preset": "demo"})
    assert run["engine_params"]["lr"] == tiny_params.PRESETS["demo"]["lr"]
    assert run["recipe"]["params"] == {**parameters("grpo"), "eps_low": 0.2, "eps_high": 0.2,
                                       "ratio_against": "rollout"}
    tis = resolve_run_config(validate({**DEMO, "recipes": ["grpo", "grpo_tis"], "claims": []}), "grpo_tis", 1, 0)["recipe"]["tis"]
    assert tis == {"cap": 2.0, "floor": None}  # the floor is the TIS weight's default, spelled out


def test_a_value_behind_a_preset_is_in_the_key(monkeypatch):
    demo = key_of()
    # Written out or left to the preset: the same run, the same key.
    assert key_of(engine_params={"preset": "demo", "lr": tiny_params.PRESETS["demo"]["lr"]}) == demo
    monkeypatch.setitem(tiny_params.PRESETS["demo"], "lr", 5e-4)  # the preset changed, the config did not
    assert key_of() != demo


def test_a_stabilizer_default_is_in_the_key(monkeypatch):
    demo = key_of()
    default = parameters("grpo")["dual_clip_c"]
    changed = {**parameters("grpo"), "dual_clip_c": 5.0}
    monkeypatch.setattr(grid_expand, "parameters", lambda loss: changed if loss == "grpo" else parameters(loss))
    assert default != 5.0 and key_of() != demo


def test_the_eval_key_changes_with_what_changes_a_score():
    settings = Config.build(load("tests/support/interval_grid.yaml")).eval.job_settings()
    key = eval_key("tiny_test", 1.0, settings, "run-a")
    for change in ({"k": 4}, {"seed": 1}, {"temperature": 0.5}, {"batch_size": 64}, {"backend": "server"},
                   {"problems": {"tiny_test": 64}}):
        assert eval_key("tiny_test", 1.0, {**settings, **change}, "run-a") != key, change
    assert eval_key("tiny_test", 2.0, settings, "run-a") != key  # a new task version
    assert eval_key("tiny_test", 1.0, settings, "run-b") != key  # another run's checkpoints
    for change in ({"fixed_step": 20}, {"tasks": ["tiny_val"]}, {"problems": {"tiny_test": 128, "tiny_val": 7}},
                   {"server": {"url": "http://elsewhere:1", "timeout": 5}}):
        assert eval_key("tiny_test", 1.0, {**settings, **change}, "run-a") == key, change


def test_the_evaluate_job_gets_only_the_settings_of_its_tasks():
    model = Config.build(load("tests/support/interval_grid.yaml"))
    settings = model.eval.job_settings()
    assert settings["problems"] == {"tiny_test": 128, "tiny_val": 128} and settings["seed"] == 1234
    assert not {"tasks", "selection_task", "fixed_step"} & set(settings)
    assert model.eval.scored_tasks == ["tiny_test", "tiny_val"]
    # An unscored task's problem count is not read.
    test_only = Config.build(load("tests/support/interval_grid.yaml", {"eval": {"tasks": ["tiny_test"], "selection_task": None,
                                                           "problems": {"tiny_test": 128, "tiny_val": 7}}}))
    assert test_only.eval.job_settings()["problems"] == {"tiny_test": 128}
    assert model.prepare_params() == tiny_params.warmstart_knobs(model.engine_params)


def test_allowed_values_come_from_the_code_that_implements_them():
    loaded = schema()
    assert loaded["properties"]["lag_mode"]["enum"] == list(LAG_MODES)
    assert loaded["properties"]["engine"]["enum"] == engines.available()
    backends = loaded["properties"]["eval"]["properties"]["backend"]["enum"]
    assert set(backends) == {engines.get(name).eval_backend for name in engines.available()} | {None}


def test_a_directory_pinned_to_another_key_is_refused_and_kept(tmp_path):
    run = resolve_run_config(load("tests/support/interval_grid.yaml"), "grpo", 1, 0)
    RunDir(tmp_path).pin_config(run)
    before = (tmp_path / "config.json").read_bytes()
    other = {**run, "engine_params": {**run["engine_params"], "lr": 1e-4}}
    assert run_key(other) != run["run_key"]
    with pytest.raises(ValueError, match=r"different config: run key \w+, the config asks for \w+ \(keys differing: "
                                         r"engine_params.lr: 0.0003 -> 0.0001\)"):
        RunDir(tmp_path).pin_config(other)
    assert (tmp_path / "config.json").read_bytes() == before


def test_provenance_is_recorded_per_attempt(tmp_path):
    facts = collect()
    assert facts["python"] and facts["torch"] and facts["host"] and len(facts["requirements_lock_sha256"]) == 64
    assert facts["git_commit"] is None or len(facts["git_commit"]) == 40
    start_attempt(RunDir(tmp_path))  # killed: never finished
    start_attempt(RunDir(tmp_path))
    finish_attempt(RunDir(tmp_path), "completed")
    attempts = json.loads((tmp_path / "provenance.json").read_text())["attempts"]
    assert [a["status"] for a in attempts] == [None, "completed"]
    assert attempts[0]["finished"] is None and attempts[1]["finished"] >= attempts[1]["started"]
    assert attempts[1]["cpu_capability"] == facts["cpu_capability"]


def test_the_run_key_does_not_name_where_results_live():
    assert key_of(results_dir="results") == key_of(results_dir="/elsewhere/renamed")
    run = resolve_run_config(load("config.yaml"), "grpo", 1, 0)
    assert run["base_model"] == BASE_MODEL  # relative to the grid folder
    folder = Path("/data/results/demo/runs/grpo/lag1/seed0")
    assert RunDir(folder).grid_dir == Path("/data/results/demo")
    with pytest.raises(FileNotFoundError, match="base model not found at /data/results/demo/base;"):
        RunConfig.check(run, RunDir(folder).grid_dir)  # the tiny engine's check_run, at the resolved path


def test_a_grid_shown_beside_another_keeps_every_run_key():
    """side_by_side is a report setting: config.yaml's runs (the demo's, running) keep their keys with it."""
    plain = Config.build(load("config.yaml")).run_configs
    beside = Config.build(load("config.yaml", {"side_by_side": {"grid": "demo_c", "label": "constant lag"}}))
    assert beside.run_configs == plain and len(plain) > 1


def test_a_run_folder_with_the_old_location_dependent_key_is_refused_by_name(tmp_path):
    run = resolve_run_config(load("config.yaml"), "grpo", 1, 0)
    old = {**run, "base_model": "results/demo/base"}  # what run configs held before
    folder = RunDir(tmp_path / "run")
    folder.pin_config(old)
    with pytest.raises(ValueError, match="run keys held the base model's path .*'results/demo/base'"):
        folder.pin_config(run)
    assert folder.read_config()["base_model"] == "results/demo/base"  # nothing overwritten


def grid_files(folder: Path) -> dict[str, bytes]:
    """Every file under a grid folder, by relative path: what a refused command must leave as it was."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_finished_run_of_another_key_is_refused_by_name_before_any_job(scratch):
    """The check common.smk makes before any job, in-process: a changed training setting over a
    finished grid is refused naming each run, its key, the config's key and the value that differs;
    the unchanged config passes; nothing is written either way."""
    config = make_grid(scratch)
    model = Config.build(config)
    before = grid_files(scratch)
    refuse_changed_runs({GridDir.of(config).run(*run).path: model.run_config(run) for run in model.runs})  # unchanged
    changed_config = validate({**config, "engine_params": {"preset": "demo", "lr": 5e-4}})
    changed = Config.build(changed_config)
    with pytest.raises(ValueError) as refused:
        refuse_changed_runs({GridDir.of(changed_config).run(*run).path: changed.run_config(run) for run in changed.runs})
    message = str(refused.value)
    assert message.startswith(f"{len(changed.runs)} run folder(s) of this grid hold runs of another config")
    first = GridDir.of(config).run("grpo", 1, 0)
    assert (f"{first.path} (completed at step {STEPS}) holds a run with a different config: run key "
            f"{first.read_config()['run_key']}, the config asks for {changed.run_config(('grpo', 1, 0))['run_key']} "
            f"(keys differing: engine_params.lr: 0.0003 -> 0.0005)") in message
    assert f"{GridDir.of(config).run('grpo', 8, 1).path} (diverged at step {DIVERGE_STEP})" in message
    assert grid_files(scratch) == before
    damaged = GridDir.of(config).run("sat_grpo", 1, 2).config_path
    damaged.write_text(damaged.read_text()[:40])  # a copy cut short
    with pytest.raises(ValueError, match=rf"^1 run folder\(s\).*\n  {damaged}: not valid JSON .*refusing to overwrite it"):
        refuse_changed_runs({GridDir.of(config).run(*run).path: model.run_config(run) for run in model.runs})


@pytest.mark.slow
def test_the_workflow_refuses_a_changed_grid_before_any_job_without_snakemake_metadata(scratch):
    """The wiring (one Snakemake call): a finished grid in a fresh place (a path with spaces), no
    .snakemake/ anywhere, a changed lr: refused before any job, naming a run and the change; every
    file of the grid unchanged."""
    results = scratch / "results with spaces"
    config = make_grid(results)
    before = grid_files(results)
    keys = ("grid", "results_dir", "recipes", "lags", "seeds", "steps", "eval_every", "eval", "collapse", "baseline")
    overrides = [f"{key}={json.dumps(config[key])}" for key in keys]
    result = snakemake("-n", "-C", *overrides, "claims=[]", 'engine_params={"preset": "demo", "lr": 0.0005}',
                       workdir=scratch / "work")
    printed = result.stdout + result.stderr
    assert result.returncode != 0, printed[-3000:]
    assert f"{GridDir.of(config).run('grpo', 1, 0).path} (completed at step {STEPS}) holds a run with a different config" in printed
    assert "engine_params.lr: 0.0003 -> 0.0005" in printed and "Job stats" not in printed
    assert grid_files(results) == before


def test_every_field_of_the_run_config_is_in_the_run_key(monkeypatch):
    """Each field of a run's config changes its key when its input changes: a field left out of the
    run config (lag_mode, say: an interval-lag run and a constant-lag run would share a folder) fails here."""
    config = validate(copy.deepcopy(DEMO))
    run = resolve_run_config(config, "grpo", 1, 0)
    assert sorted(run) == ["base_model", "engine", "engine_params", "eval_every", "grid", "lag", "lag_mode",
                           "recipe", "run_key", "seed", "steps"]
    queue = validate({**copy.deepcopy(DEMO), "lag_mode": "queue"})
    slower = validate({**copy.deepcopy(DEMO), "lag_mode": "queue", "lag_queue": {**queue["lag_queue"], "utilization": 0.5}})
    keys = {"none": run["run_key"], "grid": key_of(grid="other"), "lag_mode": key_of(lag_mode="constant"),
            "steps": key_of(steps=60), "eval_every": key_of(eval_every=10),
            "engine_params": key_of(engine_params={"preset": "demo", "lr": 1e-3}),
            "recipe": resolve_run_config(config, "gspo", 1, 0)["run_key"],
            "lag": resolve_run_config(config, "grpo", 8, 0)["run_key"],
            "seed": resolve_run_config(config, "grpo", 1, 1)["run_key"],
            "lag_queue": resolve_run_config(queue, "grpo", 1, 0)["run_key"],
            "lag_queue.utilization": resolve_run_config(slower, "grpo", 1, 0)["run_key"]}
    monkeypatch.setattr(grid_expand, "BASE_MODEL", "another base model")
    keys["base_model"] = key_of()  # the engine: the only field not varied here (one engine runs on a CPU)
    assert len(set(keys.values())) == len(keys), keys


def test_a_later_stage_reads_the_pinned_run_config_typed_and_names_a_bad_file(tmp_path):
    """Aggregate and track read a run's config.json as ``PinnedRun`` (no engine check, no raw dict)."""
    run_config = resolve_run_config(load("tests/support/interval_grid.yaml"), "grpo_mu", 8, 2)
    RunDir(tmp_path / "run").pin_config(run_config)
    pinned = RunDir(tmp_path / "run").read_pinned()
    assert (pinned.recipe.name, pinned.lag, pinned.seed, pinned.run_key) == ("grpo_mu", 8, 2, run_config["run_key"])
    assert pinned.recipe.params == run_config["recipe"]["params"] and dict(pinned.identity_keys) == {
        "run_key": run_config["run_key"]}
    for broken, named in (({k: v for k, v in run_config.items() if k != "seed"}, "'seed'"),
                          ({**run_config, "run_key": ""}, "no run_key")):
        path = tmp_path / "bad" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(broken))
        with pytest.raises(ValueError, match=named) as error:
            RunDir(path.parent).read_pinned()
        assert str(path) in str(error.value)
