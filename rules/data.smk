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
        dataset=lambda wc: wc.dataset,
        source=data_param("source"),
        path=data_param("path"),
        fields=data_param("fields"),
        hub_id=data_param("hub_id"),
        hub_config=data_param("hub_config"),
        hub_split=data_param("hub_split"),
        levels=data_param("levels"),
        limit=data_param("limit"),
        shuffle_seed=data_param("shuffle_seed"),
        skip_bad_rows=data_param("skip_bad_rows"),
        on_overlap=lambda wc: (
            config["training"]["on_overlap"]
            if wc.dataset == config["training"]["dataset"]
            else None
        ),
    script:
        "../workflow_scripts/prepare_data.py"
