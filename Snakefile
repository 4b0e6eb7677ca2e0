"""stalebench: config -> train -> evaluate -> aggregate -> track (shared/DESIGN.md).

    snakemake -c2                                    # the demo grid of config.yaml on 2 cores
    snakemake -c2 -C steps=20 'seeds=[0,1]'          # overrides, for a quick look
    snakemake --profile workflow/profiles/slurm --configfile workflow/presets/table1.yaml

The config is checked (schema, then recipe and task names, then the engine's parameters) before
any job is scheduled. Each rule's params carry only what its jobs read (harness.model), so that
Snakemake's default rerun triggers (code, input, mtime, params) redo exactly what a change affects:
a changed aggregation key reruns no train or evaluate job, a changed preset value or stabilizer
default reruns the train jobs whose resolved run config it changes, a new eval task or a changed
eval setting reruns each run's one evaluate job (which re-scores only the tasks it changes).
Every job writes a Snakemake benchmark file under <results_dir>/<grid>/logs/benchmarks/.
"""
import json
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config

from harness.config import (ConfigError, check_recipe_values, job_resources, retype_cli_values, rule_resources,
                            train_retries, validate)
from harness.model import Config
from harness.run import STATUS_PATTERN, eval_file_pattern


# The demo grid unless --configfile names another (a preset is a whole config: merged into
# config.yaml, the tiny engine's engine_params would leak into e.g. slime's).
if not workflow.config_settings.configfiles:

    configfile: "config.yaml"


envvars:
    "PATH",


# `-C lags=[1,8]` arrives as strings; give the overrides their YAML types again.
update_config(config, retype_cli_values(workflow.config_settings.overwrite_config))
try:
    CONFIG = validate(config)
    MODEL = Config.build(CONFIG)  # resolves every run (engine params, stabilizer defaults) once
    TRAIN_RETRIES = train_retries(CONFIG)
except (ConfigError, ValueError) as error:
    raise WorkflowError(str(error)) from None

# Rules call `python -m ...`: put the interpreter running snakemake (the project's venv) first on
# PATH so that `make demo` needs no activated venv; a conda env (--sdm conda) still goes before it.
VENV_BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"

ENGINE = MODEL.engine
GRID = str(MODEL.grid_dir)
RUN = f"{GRID}/runs/{{recipe}}/lag{{lag}}/seed{{seed}}"
LOGS = f"{GRID}/logs"
BENCHMARKS = f"{LOGS}/benchmarks"  # one TSV per job (analysis.provenance tabulates them per rule)
RUN_WILDCARDS = dict(zip(("recipe", "lag", "seed"), zip(*MODEL.runs)))
TASKS = MODEL.eval.scored_tasks
CONFIG_JSON = json.dumps(CONFIG, sort_keys=True)
# Every run's training status and scores (one evaluate job per run writes all its tasks'). Also
# targets of `all`: Snakemake reruns no job whose outputs exist because an input went missing, so a
# deleted run is redone only if it is a target.
RUN_OUTPUTS = expand(f"{RUN}/{STATUS_PATTERN}", zip, **RUN_WILDCARDS) + [
    path for task in TASKS for path in expand(f"{RUN}/{eval_file_pattern(task)}", zip, **RUN_WILDCARDS)]


wildcard_constraints:
    recipe=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    lag=r"\d+",
    seed=r"\d+",


onstart:
    # not in a dry run: the value checks run the loss code, which imports torch (~2 s)
    try:
        check_recipe_values(CONFIG)
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


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
