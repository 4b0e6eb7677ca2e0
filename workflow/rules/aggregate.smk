# Aggregation: statistics over seeds per cell (recipe x lag), tables and plots (analysis.aggregate).
# They are in Snakemake's HTML report too: snakemake --report results/<grid>/report.html


rule aggregate:
    input:
        runs=RUN_OUTPUTS,
        config=rules.grid_config.output,
    output:
        table=report(f"{GRID}/table.md", category="Tables"),
        csv=report(f"{GRID}/table.csv", category="Tables"),
        tex=f"{GRID}/table.tex",
        summary=f"{GRID}/summary.json",
        curves=report(f"{GRID}/curves.png", category="Plots"),
        mismatch=report(f"{GRID}/mismatch.png", category="Plots"),
        collapse=report(f"{GRID}/collapse.png", category="Plots"),
        staleness=report(f"{GRID}/staleness.png", category="Plots"),
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
