# Evaluation: every checkpoint of a run scored on every scored task (eval.score); one job per pack of a
# cell's runs, as its train job (grid.jobs.run_packs), so that the imports are paid once and each
# checkpoint's model is loaded once for all its tasks. Its
# params are what it reads (grid.settings.Eval.job_settings): not fixed_step. A changed setting of
# one task (its problem count) reruns the job, which re-scores only that task: eval.score keeps
# every score in eval/.<task>.scores.jsonl, outside the declared outputs that Snakemake deletes
# before a rerun, and reuses those computed under the task's same settings (its eval key).


for pack in PACKS:

    rule:
        name:
            f"evaluate{pack.suffix}"
        input:
            [f"{folder}/{STATUS_PATTERN}" for folder in pack.folders(RUN)],
        output:
            [f"{folder}/{eval_file_pattern(task)}" for folder in pack.folders(RUN) for task in TASKS],
        params:
            run_dirs=lambda wildcards, input: [os.path.dirname(os.path.dirname(status)) for status in input],
            tasks=TASKS,
            settings=json.dumps(MODEL.eval.job_settings(), sort_keys=True),
        log:
            f"{LOGS}/evaluate/{{recipe}}/lag{{lag}}/{pack.label}.log",
        benchmark:
            f"{BENCHMARKS}/evaluate/{{recipe}}/lag{{lag}}/{pack.label}.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "evaluate")["threads"]
        resources:
            **job_resources(CONFIG, "evaluate"),
        shell:
            "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS={threads} python -m eval.score"
            " --run-dir {params.run_dirs:q} --tasks {params.tasks:q} --settings-json {params.settings:q} > {log:q} 2>&1"
