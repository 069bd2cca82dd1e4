# Evaluation: every trained run and each model's base ("<model>/base") on every benchmark. Only
# summary.json is declared: samples.jsonl is what an interrupted evaluation resumes from, and
# Snakemake deletes the declared outputs of a failed job.


rule evaluate:
    input:
        model=eval_model,
        benchmark_file=lambda wc: data_file(wc.bench),
    output:
        summary=f"{R}/eval/{{run}}/{{bench}}/summary.json",
    log:
        f"{R}/logs/evaluate/{{run}}/{{bench}}.log",
    benchmark:
        f"{R}/timings/evaluate/{{run}}/{{bench}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("evaluate")
    resources:
        **rule_resources("evaluate"),
    params:
        script=f"{SCRIPTS}/evaluate.py",
        args=evaluate_args,
    shell:
        "python {params.script} {params.args} > {log} 2>&1"
