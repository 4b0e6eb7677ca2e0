# Evaluation: every checkpoint of a run scored on every scored task (eval.score); one job per run,
# so that the imports are paid and each checkpoint's model is loaded once for all its tasks. Its
# params are what it reads (harness.settings.Eval.job_settings): not fixed_step. A changed setting of
# one task (its problem count) reruns the job, which re-scores only that task: eval.score keeps
# every score in eval/.<task>.scores.jsonl, outside the declared outputs that Snakemake deletes
# before a rerun, and reuses those computed under the task's same settings (its eval key).


rule evaluate:
    input:
        f"{RUN}/{STATUS_PATTERN}",
    output:
        [f"{RUN}/{eval_file_pattern(task)}" for task in TASKS],
    params:
        run_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        tasks=TASKS,
        settings=json.dumps(MODEL.eval.job_settings(), sort_keys=True),
    log:
        f"{LOGS}/evaluate/{{recipe}}/lag{{lag}}/seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/evaluate/{{recipe}}/lag{{lag}}/seed{{seed}}.tsv"
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "evaluate")["threads"]
    resources:
        **job_resources(CONFIG, "evaluate"),
    shell:
        "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS={threads} python -m eval.score"
        " --run-dir {params.run_dir:q} --tasks {params.tasks:q} --settings-json {params.settings:q} > {log:q} 2>&1"
