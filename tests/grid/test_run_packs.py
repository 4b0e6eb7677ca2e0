"""grid.jobs.run_packs: the runs each train and evaluate job takes, and a packed job's retries."""
import json

import yaml

from grid.config import validate
from grid.jobs import Pack, run_packs, train_arguments, train_retries
from grid.settings import Config
from harness.run import RUN_FOLDER
from tests.support.paths import ROOT
from tests.support.tuning_grid import raw_config

DEMO = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_a_seed_schedule_packs_each_looks_seeds_and_a_fixed_design_every_seed():
    assert run_packs(Config.build(validate(DEMO))) == [Pack("", (0, 1, 2, 3, 4)), Pack("_look2", (5, 6, 7)), Pack("_look3", (8, 9, 10, 11))]
    fixed = validate({**DEMO, "seeds": [4, 2]})  # one look left: a fixed design
    assert run_packs(Config.build(fixed)) == [Pack("", (4, 2))]
    assert Pack("", (4, 2)).folders("g/" + RUN_FOLDER) == ["g/runs/{recipe}/lag{lag}/seed4", "g/runs/{recipe}/lag{lag}/seed2"]
    assert Pack("", (4, 2)).label == "seeds4_2"


def test_a_tuning_section_packs_the_tuning_seeds_apart():
    assert run_packs(Config.build(validate(raw_config()))) == [Pack("_tuning", (10, 11)), Pack("", (0, 1, 2))]


def test_an_engine_that_does_not_pack_runs_a_job_per_run():
    table1 = yaml.safe_load((ROOT / "workflow" / "presets" / "table1.yaml").read_text())
    [pack] = run_packs(Config.build(validate(table1)))
    assert pack == Pack("", None) and pack.folders(RUN_FOLDER) == [RUN_FOLDER] and pack.label == "seed{seed}"


def test_a_packed_jobs_arguments_are_each_runs_folder_and_config():
    config = validate({**DEMO, "seeds": [4, 2]})
    model = Config.build(config)
    [pack] = run_packs(model)
    outputs = [f"g/runs/grpo/lag8/seed{seed}/train/status.json" for seed in pack.seeds]
    wildcards = type("Wildcards", (), {"recipe": "grpo", "lag": "8"})()
    arguments = train_arguments(model, pack)(wildcards, outputs)
    assert arguments[0::4] == ["--run-dir"] * 2 and arguments[1::4] == ["g/runs/grpo/lag8/seed4", "g/runs/grpo/lag8/seed2"]
    assert [json.loads(text)["seed"] for text in arguments[3::4]] == [4, 2]
    assert json.loads(arguments[3]) == model.run_config(("grpo", 8, 4))


def test_a_packed_job_gets_the_retries_of_its_runs_step_budget():
    # 200 steps x 0.01 min = 2 min a run; 5 min less the tiny engine's 60 s warning leaves 4 a job
    config = validate({**DEMO, "resources": {"train": {"runtime": 5}}})
    assert [train_retries(config, runs) for runs in (1, 2, 3, 5)] == [1, 1, 2, 3]
