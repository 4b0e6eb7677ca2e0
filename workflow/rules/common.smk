# Plumbing (docs/design.md, "The house"): the config checked once, the typed model, the paths
# and resources every rule file uses. The rules stay thin; what a config means to Snakemake lives in
# grid.jobs, what it means to a stage in grid.settings.
import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config

from grid.config import ConfigError, check_recipe_values, validate
from grid.lines import with_lines
from grid.folder import QUEUE_PLOTS, GridDir
from harness.io import write_json_atomic
from grid.design import refuse_redeclared
from grid.jobs import canary_run, job_resources, retype_cli_values, rule_resources, run_packs, stop_arguments, train_arguments, train_retries
from grid.settings import Config
from harness.run import RUN_FOLDER, STATUS_PATTERN, eval_file_pattern
from grid.expand import refuse_changed_runs
from analysis.cells.reference import REFERENCE as PUBLISHED


# `-C lags=[1,8]` arrives as strings; give the overrides their YAML types again.
update_config(config, retype_cli_values(workflow.config_settings.overwrite_config))
try:
    CONFIG = validate(config)
    MODEL = Config.build(CONFIG)  # resolves every run (engine params, stabilizer defaults) once
    PACKS = run_packs(MODEL)  # the runs each train and evaluate job takes (train.smk, evaluate.smk)
    TRAIN_RETRIES = {pack.suffix: train_retries(CONFIG, pack.size) for pack in PACKS}
    # Run identity from the run folders, before any job (and whether or not .snakemake/ is there): a
    # run folder holding another run key is refused here, not by its train job after Snakemake has
    # deleted the job's outputs. Not again in a cluster job's own snakemake.
    if workflow.is_main_process:
        refuse_changed_runs({MODEL.folder.run(*run).path: MODEL.run_config(run) for run in MODEL.runs})
        # a request that reads a grid's runs under another design than it pinned at its first look
        # (-C seeds=[0], fewer claims): refused before Snakemake plans (grid.design)
        refuse_redeclared(MODEL)
except (ConfigError, ValueError) as error:
    # each key's file and line: the --configfile(s), else the default config.yaml (Snakefile); not a -C key's
    FILES = [Path(f) for f in workflow.config_settings.configfiles] or [Path(workflow.basedir) / "config.yaml"]
    raise WorkflowError(with_lines(str(error), FILES, set(workflow.config_settings.overwrite_config))) from None

# Rules call `python -m ...`: put the interpreter running snakemake (the project's venv) first on
# PATH so that `make demo` needs no activated venv; a conda env (--sdm conda) still goes before it.
VENV_BIN = os.path.dirname(sys.executable)
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"

ENGINE = MODEL.engine
GRID_DIR = GridDir(MODEL.grid_dir)  # every path of the grid folder (grid.folder)
GRID = str(GRID_DIR.path)
RUN = f"{GRID}/{RUN_FOLDER}"
LOGS = str(GRID_DIR.logs_dir)
BENCHMARKS = str(GRID_DIR.benchmarks_dir)  # one TSV per job (GridDir.job_costs tabulates them per rule)
TASKS = MODEL.eval.scored_tasks
# The summary.json of the grid shown beside this one (config side_by_side), an input of aggregate once it
# is there: a rerun of that grid re-renders this grid's table. Before it is, this grid still trains and
# its aggregate job fails naming the key and the file (analysis.report.compare.load_beside).
BESIDE = MODEL.beside_folder
BESIDE_SUMMARY = [str(BESIDE.summary_path)] if BESIDE is not None and BESIDE.summary_path.exists() else []
# The files a job reads that no rule makes (the project ships them): an input of each job reading them, so that
# a missing one is named before the first job (Snakemake's missing input), not by the job hours later.
REFERENCE = str(PUBLISHED)
wildcard_constraints:
    recipe=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    lag=r"\d+",
    seed=r"\d+",
    look=r"\d+",


# The checked config, written once per change to <grid>/config.json: the input of aggregate and
# track. Its params are the config, so the job reruns (and the file is rewritten) only when the
# config changes, and a dry run writes nothing.
localrules:
    grid_config,


rule grid_config:
    output:
        str(GRID_DIR.config_path),
    params:
        config=json.dumps(CONFIG, sort_keys=True),
    log:
        f"{LOGS}/grid_config.log",  # (empty: the job writes one file and prints nothing)
    benchmark:
        f"{BENCHMARKS}/grid_config.tsv"
    run:
        write_json_atomic(output[0], CONFIG)


onstart:
    # not in a dry run: the value checks run the loss code, which imports torch (~2 s)
    try:
        check_recipe_values(CONFIG)
    except ConfigError as error:
        raise WorkflowError(str(error)) from None
