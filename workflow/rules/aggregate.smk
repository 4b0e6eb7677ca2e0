# Aggregation: statistics over seeds per cell (recipe x lag), tables and plots (analysis.aggregate).
# They are in Snakemake's HTML report too: snakemake --report results/<grid>/report.html


# A declared seed schedule (config seeding): after each look but the last, an interim job reads the
# claims and writes the runs the next look adds to the cells of claims still open (analysis.schedule.looks);
# the DAG grows from its output.
checkpoint look:
    input:
        runs=lambda wildcards: scheduled_outputs(int(wildcards.look)),
        config=rules.grid_config.output,
        reference=REFERENCE,
    output:
        GRID_DIR.look_pattern,
    params:
        grid=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
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
        "python -m analysis.schedule.looks --grid {params.grid:q} --look {wildcards.look}"
        " --out {output:q} > {log:q} 2>&1"


# An equal tuning budget (config tuning): once the candidates' runs on the tuning seeds are scored, one
# grid-wide job picks each recipe's value by the declared rule and names the confirmation runs
# (analysis.schedule.tune); the DAG grows from its output. Its params: the section, so a changed rule reruns it.
if TUNING is not None:

    checkpoint tune:
        input:
            runs=run_outputs(TUNING.runs()),
            config=rules.grid_config.output,
        output:
            str(GRID_DIR.tuning_path),
        params:
            tuning=json.dumps(CONFIG["tuning"], sort_keys=True),
            grid=lambda wildcards, output: os.path.dirname(output[0]),
        log:
            f"{LOGS}/tune.log",
        benchmark:
            f"{BENCHMARKS}/tune.tsv"
        conda:
            "../../envs/stalebench-cpu.yaml"
        threads: rule_resources(CONFIG, "aggregate")["threads"]
        resources:
            **job_resources(CONFIG, "aggregate"),
        shell:
            "python -m analysis.schedule.tune --grid {params.grid:q} --out {output:q} > {log:q} 2>&1"


rule aggregate:
    input:
        runs=lambda wildcards: scheduled_outputs(LOOKS),
        config=rules.grid_config.output,
        reference=REFERENCE,
        beside=BESIDE_SUMMARY,
    output:
        table=report(str(GRID_DIR.table_path("md")), category="Tables"),
        csv=report(str(GRID_DIR.table_path("csv")), category="Tables"),
        tex=str(GRID_DIR.table_path("tex")),
        summary=str(GRID_DIR.summary_path),
        times=str(GRID_DIR.job_times_path),
        curves=report(str(GRID_DIR.plot_path("curves")), category="Plots"),
        mismatch=report(str(GRID_DIR.plot_path("mismatch")), category="Plots"),
        dynamics=report(str(GRID_DIR.plot_path("dynamics")), category="Plots"),
        collapse=report(str(GRID_DIR.plot_path("collapse")), category="Plots"),
        staleness=report(str(GRID_DIR.plot_path("staleness")), category="Plots"),
        # a queue grid's plots, for a queue grid only (analysis.report.write; another's table.md says why)
        **{name: report(str(GRID_DIR.plot_path(name)), category="Plots")
           for name in QUEUE_PLOTS if MODEL.lag_mode == "queue"},
    params:
        grid=lambda wildcards, output: os.path.dirname(output.summary),
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
        "python -m analysis.aggregate --grid {params.grid:q} > {log:q} 2>&1"
