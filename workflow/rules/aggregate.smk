# Aggregation: statistics over seeds per cell (recipe x lag), tables and plots (analysis.aggregate).
# They are in Snakemake's HTML report too: snakemake --report results/<grid>/report.html


rule aggregate:
    input:
        runs=RUN_OUTPUTS,
        config=rules.grid_config.output,
    output:
        table=report(str(GRID_DIR.table_path("md")), category="Tables"),
        csv=report(str(GRID_DIR.table_path("csv")), category="Tables"),
        tex=str(GRID_DIR.table_path("tex")),
        summary=str(GRID_DIR.summary_path),
        curves=report(str(GRID_DIR.plot_path("curves")), category="Plots"),
        mismatch=report(str(GRID_DIR.plot_path("mismatch")), category="Plots"),
        collapse=report(str(GRID_DIR.plot_path("collapse")), category="Plots"),
        staleness=report(str(GRID_DIR.plot_path("staleness")), category="Plots"),
    params:
        out=lambda wildcards, output: os.path.dirname(output.table),
    log:
        f"{LOGS}/aggregate.log",
    benchmark:
        f"{BENCHMARKS}/aggregate.tsv"
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "aggregate")["threads"]
    resources:
        **job_resources(CONFIG, "aggregate"),
    shell:
        "python -m analysis.aggregate --config-json {input.config:q} --out {params.out:q} > {log:q} 2>&1"
