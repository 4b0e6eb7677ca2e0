# Aggregation: statistics over seeds per cell (recipe x lag), tables and plots (analysis.aggregate).
# They are in Snakemake's HTML report too: snakemake --report results/<grid>/report.html


# A declared seed schedule (config seeding): after each look but the last, an interim job reads the
# claims and writes the runs the next look adds to the cells of claims still open (analysis.looks);
# the DAG grows from its output.
checkpoint look:
    input:
        runs=lambda wildcards: scheduled_outputs(int(wildcards.look)),
        config=rules.grid_config.output,
    output:
        f"{GRID}/looks/look{{look}}.json",
    log:
        f"{LOGS}/look{{look}}.log",
    benchmark:
        f"{BENCHMARKS}/look{{look}}.tsv"
    conda:
        "../../envs/stalebench-cpu.yaml"
    threads: rule_resources(CONFIG, "aggregate")["threads"]
    resources:
        **job_resources(CONFIG, "aggregate"),
    shell:
        "python -m analysis.looks --config-json {input.config:q} --look {wildcards.look}"
        " --out {output:q} > {log:q} 2>&1"


rule aggregate:
    input:
        runs=lambda wildcards: scheduled_outputs(LOOKS),
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
