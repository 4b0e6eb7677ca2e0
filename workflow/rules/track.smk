# MLflow: the single writer, last. Files are the source of truth; running it again updates the
# experiment's runs (keyed by run key) and never duplicates them. A live sync beside the workflow
# (python -m tracking.sync --follow N) holds the grid's lock until the grid is aggregated: this rule
# waits for it (--wait-lock), then finishes the same runs. Its last line, shown here too, is the UI link.


rule track:
    input:
        aggregated=rules.aggregate.output,
        config=rules.grid_config.output,
    output:
        str(GRID_DIR.mlflow_path),
    params:
        grid=lambda wildcards, output: os.path.dirname(output[0]),
    log:
        f"{LOGS}/track.log",
    benchmark:
        f"{BENCHMARKS}/track.tsv"
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "track")["threads"]
    resources:
        **job_resources(CONFIG, "track"),
    shell:
        "python -m tracking.sync --grid {params.grid:q} --wait-lock 3600"
        " > {log:q} 2>&1 && tail -n 1 {log:q}"
