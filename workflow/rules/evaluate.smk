# Evaluation: every checkpoint of a run scored on one task (eval.score); a job per run and task.
# Its params are what it reads (harness.model.Eval.job_settings): not fixed_step, the task lists
# or another task's settings. eval.score keeps every score in eval/.<task>.scores.jsonl, outside
# the declared output that Snakemake deletes before a rerun, so a killed or rerun job re-scores
# only the checkpoints that have no score under the same settings.


rule evaluate:
    input:
        f"{RUN}/train/status.json",
    output:
        f"{RUN}/eval/{{task}}.jsonl",
    params:
        run_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        settings=lambda wc: json.dumps(MODEL.eval.job_settings(wc.task), sort_keys=True),
    log:
        f"{LOGS}/evaluate/{{recipe}}/lag{{lag}}/seed{{seed}}/{{task}}.log",
    benchmark:
        f"{BENCHMARKS}/evaluate/{{recipe}}/lag{{lag}}/seed{{seed}}/{{task}}.tsv"
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "evaluate")["threads"]
    resources:
        **job_resources(CONFIG, "evaluate"),
    shell:
        "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS={threads} python -m eval.score"
        " --run-dir {params.run_dir:q} --task {wildcards.task:q} --settings-json {params.settings:q} > {log:q} 2>&1"
