# Tables (CSV + Markdown), figures (PNG + PDF), the HTML report and the named targets. Tables and
# figures read only cached analysis files, so they rerun without training or evaluation; each kind
# has its own script (workflow_scripts/tables.py, workflow_scripts/plot.py), so a change in the
# plotting code reruns only the plotting jobs.


rule table:
    input:
        unpack(table_inputs),
    output:
        csv=report(
            f"{R}/tables/{{name}}.csv",
            caption="captions/table.rst",
            # "Tables", or the reproduction table's own category, listed first
            category=lambda wc: declared_table_of(wc.name).category,
            labels={"table": "{name}"},
        ),
        md=f"{R}/tables/{{name}}.md",
    log:
        f"{R}/logs/tables/{{name}}.log",
    benchmark:
        f"{R}/timings/tables/{{name}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("plot")
    resources:
        **rule_resources("plot"),
    params:
        benchmarks=lambda wc: table_benchmarks(wc.name),
        # the cost table says when its times are comparable (training jobs alone)
        train_threads=int(REG.resources.resource_set("train")["threads"]),
        main_methods=config["runs"]["main"]["methods"],
        default_tau=config["training"]["oar"]["tau"],
        default_beta=config["training"]["oar"]["beta"],
        default_probe=config["training"]["oar"]["probe"],
        reward_threshold=REG.paired["reward_threshold"],
        reward_gain=REG.paired.get("reward_gain"),
        paired_benchmark=REG.paired["benchmark"],
        # the declared primary comparisons (Holm over them) and the comparison tests this config does not run
        primary=REG.primary,
        not_run=REG.comparisons_not_run(),
        # the decisive reading's levels: each main chain policy's remarks and note words per step
        levels=REG.distractor_levels(),
        baseline=REG.paired["baseline"],
        # every registered study's design by its name (oar.studies; the upper-bound test's with every declared
        # seed), read by the study's own tables
        designs=study_designs(),
        configfiles=[os.path.abspath(f) for f in workflow.configfiles],
        decision_rules=decision_rules(),
        decided_runs=decided_run_files(),
    script:
        "../workflow_scripts/tables.py"


rule figure:
    input:
        unpack(figure_inputs),
    output:
        png=report(
            f"{R}/figures/{{name}}.png",
            caption="captions/figure.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
        pdf=f"{R}/figures/{{name}}.pdf",
    log:
        f"{R}/logs/figures/{{name}}.log",
    benchmark:
        f"{R}/timings/figures/{{name}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("plot")
    resources:
        **rule_resources("plot"),
    params:
        heatmap_scorers=HEATMAP["scorers"],
        response_index=HEATMAP["response_index"],
        max_tokens=HEATMAP["max_tokens"],
        tau=config["training"]["oar"]["tau"],
        beta=config["training"]["oar"]["beta"],
        floor=config["training"]["oar"]["floor"],
        paired_benchmark=REG.paired["benchmark"],
        model_labels=REG.model_labels(),
    script:
        "../workflow_scripts/plot.py"


rule html_report:
    input:
        tables=table_files(*TABLES),
        figures=figure_files(*FIGURES),
    output:
        html=f"{R}/report.html",
    log:
        f"{R}/logs/report.log",
    benchmark:
        f"{R}/timings/report.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("plot")
    resources:
        **rule_resources("plot"),
    params:
        snakefile=workflow.main_snakefile,
        config=config,
    script:
        "../workflow_scripts/report.py"


# ------------------------------------------------------------------------------ named targets


rule main_table:
    input:
        table_files("main_table"),


rule ablation_gating:
    input:
        declared_table("ablation_gating"),


rule ablation_grid:
    input:
        declared_table("ablation_grid", "grid_heatmap"),


rule ablation_probe:
    input:
        declared_table("ablation_probe"),


rule causal_recall:
    input:
        table_files("causal_recall"),
        figure_files("recall_bars"),


rule fidelity:
    input:
        table_files("fidelity"),


rule cost:
    input:
        table_files("cost"),
        figure_files("cost_bars"),


rule paired_differences:
    input:
        table_files("paired_differences", "length_sweep", "decisive"),
        figure_files("main_comparison", "length_sweep"),


rule tables:
    input:
        table_files(*TABLES),


rule figures:
    input:
        figure_files(*FIGURES),


rule report:
    input:
        rules.html_report.output.html,


rule step_credit:
    input:
        table_files("step_credit"),


rule upper_bound:
    input:
        table_files("upper_bound", "paired_differences"),


rule mechanism:
    input:
        table_files("mechanism", "paired_differences"),
