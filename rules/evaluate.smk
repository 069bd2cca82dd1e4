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
        f"{R}/benchmarks/evaluate/{{run}}/{{bench}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("evaluate")
    resources:
        **rule_resources("evaluate"),
    params:
        limit=eval_param("limit"),
        n=eval_param("n"),
        temperature=eval_param("temperature"),
        top_p=eval_param("top_p"),
        max_new_tokens=eval_param("max_new_tokens"),
        backend=eval_param("backend"),
        batch_size=eval_param("batch_size"),
        dtype=eval_param("dtype"),
        chat=eval_param("chat"),
        seed=eval_param("seed"),
        n_boot=eval_param("n_boot"),
        threads=lambda wc, threads: threads,
        quiet=True,
    script:
        "../workflow_scripts/evaluate.py"
