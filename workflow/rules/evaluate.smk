# Evaluation: every checkpoint of a run scored on one task (eval.score); a job per run and task.


rule evaluate:
    input:
        f"{RUN}/train/status.json",
    output:
        f"{RUN}/eval/{{task}}.jsonl",
    params:
        run_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        settings=json.dumps(CONFIG["eval"], sort_keys=True),
    log:
        f"{LOGS}/evaluate/{{recipe}}/lag{{lag}}/seed{{seed}}/{{task}}.log",
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "evaluate")["threads"]
    resources:
        **job_resources(CONFIG, "evaluate"),
    shell:
        "HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS={threads} python -m eval.score"
        " --run-dir {params.run_dir:q} --task {wildcards.task:q} --settings-json {params.settings:q} > {log:q} 2>&1"
