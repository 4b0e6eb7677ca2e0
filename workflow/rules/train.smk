# Training: one job per pack of a cell's runs (below); an engine with a grid-wide prepare step (e.g. a
# warm-start model) runs it first. engines.train resumes from the run's last checkpoint,
# so a killed job run again (--rerun-incomplete) redoes only the missing steps; it writes the run's status last.
# A train job's params are its resolved run config (presets expanded, every stabilizer default):
# a change to any of it reruns the job; the prepare job gets only the engine params it reads.
# A job stopped before its time limit (exit 75) is retried too: its retries cover the jobs its runs' step
# budget needs within the time limit, plus one (grid.jobs.train_retries).

if ENGINE.prepare_outputs:

    rule prepare:
        output:
            multiext(f"{GRID_DIR.base_dir}/", *ENGINE.prepare_outputs),
        params:
            engine=ENGINE.name,
            engine_params=json.dumps(MODEL.prepare_params(), sort_keys=True),
            out=lambda wildcards, output: os.path.dirname(output[0]),
        log:
            f"{LOGS}/prepare.log",
        benchmark:
            f"{BENCHMARKS}/prepare.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "prepare")["threads"]
        resources:
            **job_resources(CONFIG, "prepare"),
        shell:
            "OMP_NUM_THREADS={threads} python -m engines.prepare --engine {params.engine:q}"
            " --engine-params-json {params.engine_params:q} --out {params.out:q} > {log:q} 2>&1"


NULL_CHECK = MODEL.null_check_params()  # None: the engine has no lag-0 null check, or the config turns it off
if NULL_CHECK is not None:

    # The lag-0 null check (harness.engine: null_check; config key null_check): refuses the grid, with its
    # numbers, before any run trains. Its resources are prepare's (another grid-wide step of the engine).
    rule null_check:
        input:
            rules.prepare.output if ENGINE.prepare_outputs else [],
        output:
            str(GRID_DIR.null_check_path),
        params:
            engine=ENGINE.name,
            check=json.dumps(NULL_CHECK, sort_keys=True),
            # a list, each item quoted by :q (a results path with spaces is one argument)
            base=["--base", str(GRID_DIR.base_dir)] if ENGINE.prepare_outputs else [],
        log:
            f"{LOGS}/null_check.log",
        benchmark:
            f"{BENCHMARKS}/null_check.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "prepare")["threads"]
        resources:
            **job_resources(CONFIG, "prepare"),
        shell:
            "OMP_NUM_THREADS={threads} python -m engines.null_check --engine {params.engine:q}"
            " --params-json {params.check:q} {params.base:q} --out {output:q} > {log:q} 2>&1"
            " || {{ cat {log:q} >&2; exit 2; }}"


# The engine's canary (harness.engine: canary; engines.canary), where the config's canary says so: the grid's
# heaviest run (grid.jobs.canary_run) alone, in a scratch folder, through what every job meets, then one problem
# of each scored task scored on its saves with the evaluate jobs' command and settings; every train job waits
# for its report, so a failure common to every job costs this one job. Its job is a train job's size; it is
# not retried: what failed is for a person to read (its log names it), not to run again unchanged.
if MODEL.canary:

    rule canary:
        input:
            rules.prepare.output if ENGINE.prepare_outputs else [],
            ancient(rules.null_check.output) if NULL_CHECK is not None else [],
        output:
            str(GRID_DIR.canary_path),
        params:
            run=json.dumps(MODEL.run_config(canary_run(MODEL)), sort_keys=True),
            run_dir=str(GRID_DIR.canary_dir),
            evaluation=json.dumps({"tasks": TASKS, "settings": MODEL.eval.job_settings()}, sort_keys=True),
        log:
            f"{LOGS}/canary.log",
        benchmark:
            f"{BENCHMARKS}/canary.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "train")["threads"]
        retries: 0
        resources:
            **job_resources(CONFIG, "train"),
        shell:
            "OMP_NUM_THREADS={threads} python -m engines.canary --run-dir {params.run_dir:q}"
            " --config-json {params.run:q} --eval-json {params.evaluation:q} --out {output:q} > {log:q} 2>&1"
            " || {{ cat {log:q} >&2; exit 2; }}"


# One job per pack of a cell's runs (grid.jobs.run_packs: a look's seeds where the engine packs runs,
# else one run): engines.train trains them one after another in one process, each with its own lock,
# status and resume, so that a killed or stopped job's retry resumes each run where it stopped.
for pack in PACKS:

    rule:
        name:
            f"train{pack.suffix}"
        input:
            rules.prepare.output if ENGINE.prepare_outputs else [],
            # ancient: a rerun of the check (a changed level) that passes does not redo finished runs
            ancient(rules.null_check.output) if NULL_CHECK is not None else [],
            # ancient: a passed canary is not run again when the grid's config changes later
            ancient(rules.canary.output) if MODEL.canary else [],
        output:
            [f"{folder}/{STATUS_PATTERN}" for folder in pack.folders(RUN)],
        params:
            runs=train_arguments(MODEL, pack),
            stop=stop_arguments(CONFIG),
        log:
            f"{LOGS}/train/{{recipe}}/lag{{lag}}/{pack.label}.log",
        benchmark:
            f"{BENCHMARKS}/train/{{recipe}}/lag{{lag}}/{pack.label}.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "train")["threads"]
        # Only the main snakemake retries. Inside a cluster job the executor's job-step snakemake would
        # otherwise rerun a trainer that stopped at the time-limit warning within the same allocation,
        # past the (one-off) warning, into the limit.
        retries: TRAIN_RETRIES[pack.suffix] if workflow.is_main_process else 0
        resources:
            **job_resources(CONFIG, "train"),
        shell:
            "OMP_NUM_THREADS={threads} python -m engines.train {params.stop:q} {params.runs:q} > {log:q} 2>&1"
