"""stalebench: config -> train -> evaluate -> aggregate -> track (docs/design.md). A person runs it as
`stalebench run [SNAKEMAKE OPTIONS]` (stalebench/workflow.py: the config file checked first, a killed run
resumed, the messages without the project's paths); Snakemake itself runs it the same way:

    snakemake -c2                                    # the demo grid of config.yaml on 2 cores
    snakemake -c2 -C steps=20 'seeds=[0,1]'          # overrides, for a quick look
    snakemake --profile workflow/profiles/slurm --configfile workflow/presets/table1.yaml

The config is checked (schema, then recipe and task names, then the engine's parameters) before
any job is scheduled. Each rule's params carry only what its jobs read (grid.settings), so that
Snakemake's default rerun triggers (code, input, mtime, params) redo exactly what a change affects:
a changed aggregation key reruns no train or evaluate job, a new eval task or a changed eval
setting reruns each run's one evaluate job (which re-scores only the tasks it changes). A changed
preset value or stabilizer default that changes the resolved run config of a run folder already
there is refused before any job, from the configs the folders pin (grid.expand.refuse_changed_runs).
Every job writes a Snakemake benchmark file under <results_dir>/<grid>/logs/benchmarks/.
"""
import os

from snakemake.exceptions import WorkflowError

from grid.config import ConfigError, read_file
from stalebench.workflow import closing_lines

# The demo grid unless --configfile names another (a preset is a whole config: merged into
# config.yaml, the tiny engine's engine_params would leak into e.g. slime's).
# Beside this Snakefile, so that `snakemake -s <checkout>/Snakefile -d <elsewhere>` (the tests: no state
# in the checkout) reads the same default. Read by the project first: a syntax error names the file, its
# line and column (Snakemake's own message names neither). A --configfile Snakemake reads before this
# file: `make demo CONFIG=FILE` checks it first (python -m grid.config FILE).
if not workflow.config_settings.configfiles:
    try:
        read_file(os.path.join(workflow.basedir, "config.yaml"))
    except ConfigError as error:
        raise WorkflowError(str(error)) from None

    configfile: os.path.join(workflow.basedir, "config.yaml")


envvars:
    "PATH",


include: "workflow/rules/common.smk"
include: "workflow/rules/schedule.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/track.smk"


onsuccess:
    for line in closing_lines(GRID_DIR):
        print(line)


rule all:
    default_target: True
    input:
        lambda wildcards: scheduled_outputs(LOOKS),
        rules.aggregate.output,
        rules.track.output,
