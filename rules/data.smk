# Model and data preparation: every source (packaged, tiny, folder, hub id) becomes a plain model
# folder, every dataset a normalised JSONL file with its summary. What reads the hub runs where the
# network is: fetch_model (hub weights into the cache) and prepare_data are local rules (the Snakefile's
# `localrules`), run by Snakemake itself, on a cluster's login node; prepare_model, a cluster job, reads
# the weights from the cache with the hub offline.


rule fetch_model:
    output:
        summary=f"{R}/models/{{model}}.fetched.json",
    log:
        f"{R}/logs/fetch_model/{{model}}.log",
    conda:
        "../envs/oar.yaml"
    params:
        source=lambda wc: config["models"][wc.model]["source"],
    script:
        "../workflow_scripts/fetch_model.py"


rule prepare_model:
    input:
        fetched=lambda wc: REG.fetch_files(wc.model),
    output:
        model=directory(f"{R}/models/{{model}}"),
        summary=f"{R}/models/{{model}}.summary.json",
    log:
        f"{R}/logs/prepare_model/{{model}}.log",
    benchmark:
        f"{R}/timings/prepare_model/{{model}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("prepare_model")
    resources:
        **rule_resources("prepare_model"),
    params:
        source=lambda wc: config["models"][wc.model]["source"],
        seed=lambda wc: config["models"][wc.model]["seed"],
        pretrain=lambda wc: pretrain_settings(wc.model),
        frozen=lambda wc: REG.frozen_policy(wc.model),
        threads=lambda wc, threads: threads,
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
        f"{R}/timings/prepare_data/{{dataset}}.tsv"
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


# A shipped policy (models.<name>.frozen) pretrained again from the recipe that made it, beside the shipped
# file: whether this machine's kernels give the same bits (`make rebuild-policies`). Nothing reads the rebuilt
# folder; the runs keep starting from the shipped file.
rule rebuild_policy:
    output:
        model=directory(f"{R}/models-rebuilt/{{model}}"),
        report=f"{R}/models-rebuilt/{{model}}.json",
    log:
        f"{R}/logs/rebuild_policy/{{model}}.log",
    benchmark:
        f"{R}/timings/rebuild_policy/{{model}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("prepare_model")
    resources:
        **rule_resources("prepare_model"),
    params:
        policy=lambda wc: REG.frozen_policy(wc.model),
        seed=lambda wc: config["models"][wc.model]["seed"],
        pretrain=lambda wc: pretrain_settings(wc.model),
        threads=lambda wc, threads: threads,
    script:
        "../workflow_scripts/rebuild_policy.py"


rule rebuild_policies:
    input:
        [f"{R}/models-rebuilt/{m}.json" for m in model_names() if REG.frozen_policy(m)],
