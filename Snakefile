"""stalebench: config -> train -> evaluate -> aggregate -> track (shared/DESIGN.md).

    snakemake -c2                                    # the demo grid of config.yaml on 2 cores
    snakemake -c2 -C steps=20 'seeds=[0,1]'          # overrides, for a quick look
    snakemake --profile workflow/profiles/slurm --configfile workflow/presets/table1.yaml

The config is checked (schema, then recipe and task names) before any job is scheduled.
"""
import json
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config

import engines
from harness.config import ConfigError, job_resources, retype_cli_values, rule_resources, train_retries, validate
from harness.grid import expand as grid_runs, grid_dir, resolve_run_config
from stabilizers import load_recipes


configfile: "config.yaml"


envvars:
    "PATH",


# `-C lags=[1,8]` arrives as strings; give the overrides their YAML types again.
update_config(config, retype_cli_values(workflow.config_settings.overwrite_config))
try:
    CONFIG = validate(config)
    TRAIN_RETRIES = train_retries(CONFIG)
except ConfigError as error:
    raise WorkflowError(str(error)) from None

# Rules call `python -m ...`: put the interpreter running snakemake (the project's venv) first on
# PATH so that `make demo` needs no activated venv; a conda env (--sdm conda) still goes before it.
VENV_BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"

ENGINE = engines.get(CONFIG["engine"])
GRID = str(grid_dir(CONFIG))
RUN = f"{GRID}/runs/{{recipe}}/lag{{lag}}/seed{{seed}}"
LOGS = f"{GRID}/logs"
RUNS = grid_runs(CONFIG)
RUN_WILDCARDS = dict(zip(("recipe", "lag", "seed"), zip(*RUNS)))
SELECTION = CONFIG["eval"]["selection_task"]
# Scored on every checkpoint: the test tasks and the split that selects the checkpoint.
TASKS = CONFIG["eval"]["tasks"] + ([SELECTION] if SELECTION and SELECTION not in CONFIG["eval"]["tasks"] else [])
# Recipes loaded once: resolving a 1,000-run grid then takes milliseconds, not seconds.
RECIPES = load_recipes(extra=CONFIG["extra_recipes"])
RUN_CONFIGS = {run: resolve_run_config(CONFIG, *run, recipes=RECIPES) for run in RUNS}
CONFIG_JSON = json.dumps(CONFIG, sort_keys=True)
# Every run's training status and scores. Also targets of `all`: Snakemake reruns no job whose
# outputs exist because an input went missing, so a deleted run is redone only if it is a target.
RUN_OUTPUTS = expand(f"{RUN}/train/status.json", zip, **RUN_WILDCARDS) + [
    path for task in TASKS for path in expand(f"{RUN}/eval/{task}.jsonl", zip, **RUN_WILDCARDS)]


wildcard_constraints:
    recipe=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    lag=r"\d+",
    seed=r"\d+",
    task=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/track.smk"


rule all:
    default_target: True
    input:
        RUN_OUTPUTS,
        rules.aggregate.output,
        rules.track.output,
