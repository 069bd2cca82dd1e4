# Model and data preparation: every source (packaged, tiny, folder, hub id) becomes a plain model
# folder, every dataset a normalised JSONL file with its summary.


rule prepare_model:
    output:
        model=directory(f"{R}/models/{{model}}"),
        summary=f"{R}/models/{{model}}.summary.json",
    log:
        f"{R}/logs/prepare_model/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/prepare_model/{{model}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("prepare_model")
    resources:
        **rule_resources("prepare_model"),
    params:
        source=lambda wc: config["models"][wc.model]["source"],
        seed=lambda wc: config["models"][wc.model]["seed"],
    script:
        "../workflow_scripts/prepare_model.py"


rule prepare_data:
    input:
        against=against_files,
    output:
        out=f"{R}/data/{{dataset}}.jsonl",
        summary=f"{R}/data/{{dataset}}.summary.json",
    log:
        f"{R}/logs/prepare_data/{{dataset}}.log",
    benchmark:
        f"{R}/benchmarks/prepare_data/{{dataset}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("prepare_data")
    resources:
        **rule_resources("prepare_data"),
    params:
        script=f"{SCRIPTS}/prepare_data.py",
        args=prepare_data_args,
    shell:
        "python {params.script} {params.args} > {log} 2>&1"
