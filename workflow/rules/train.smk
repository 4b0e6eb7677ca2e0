# Training: one job per (recipe, lag, seed); the tiny engine first builds the grid's shared
# warm-start model. engines.run resumes from the run's last checkpoint, so a killed job run
# again (--rerun-incomplete) redoes only the missing steps; it writes status.json last.


rule warmstart:
    output:
        multiext(f"{GRID}/base/", "model.safetensors", "config.json"),
    params:
        engine_params=json.dumps(CONFIG["engine_params"], sort_keys=True),
        out=lambda wildcards, output: os.path.dirname(output[0]),
    log:
        f"{LOGS}/warmstart.log",
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "warmstart")["threads"]
    resources:
        **job_resources(CONFIG, "warmstart"),
    shell:
        "OMP_NUM_THREADS={threads} python -m engines.tiny.warmstart"
        " --engine-params-json {params.engine_params:q} --out {params.out:q} > {log:q} 2>&1"


rule train:
    input:
        # Only the tiny engine warm-starts from a model that the workflow builds.
        rules.warmstart.output if CONFIG["engine"] == "tiny" else [],
    output:
        f"{RUN}/train/status.json",
    params:
        run_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        run_config=lambda wc: json.dumps(RUN_CONFIGS[(wc.recipe, int(wc.lag), int(wc.seed))], sort_keys=True),
    log:
        f"{LOGS}/train/{{recipe}}/lag{{lag}}/seed{{seed}}.log",
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "train")["threads"]
    resources:
        **job_resources(CONFIG, "train"),
    shell:
        "OMP_NUM_THREADS={threads} python -m engines.run"
        " --run-dir {params.run_dir:q} --config-json {params.run_config:q} > {log:q} 2>&1"
