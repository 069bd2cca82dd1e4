# Training: one job per run id of the registry (rules/common.smk). The run's fully resolved settings
# go to workflow_scripts/train.py as a param (a change in them reruns the run) and are written to
# results/runs/<run>/run.yaml with versions and the git commit. A rerun resumes from checkpoints/.


rule train:
    input:
        model=lambda wc: model_dir(model_of(wc.run)),
        train_file=data_file(config["training"]["dataset"]),
    output:
        done=f"{R}/runs/{{run}}/done",
        model=directory(f"{R}/runs/{{run}}/model"),
        metrics=f"{R}/runs/{{run}}/metrics.jsonl",
    log:
        f"{R}/logs/train/{{run}}.log",
    benchmark:
        f"{R}/benchmarks/train/{{run}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("train")
    resources:
        **rule_resources("train"),
    params:
        settings=lambda wc: RUNS[wc.run],
    script:
        "../workflow_scripts/train.py"
