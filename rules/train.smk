# Training: one job per run id of the registry (rules/common.smk). The run's fully resolved settings
# are written to results/runs/<run>/settings.yaml (rewritten, and the run retrained, when they
# change); train.py copies them into run.yaml with versions and the git commit. A rerun of a killed
# run resumes from its checkpoints/.


rule run_settings:
    output:
        settings=f"{R}/runs/{{run}}/settings.yaml",
    log:
        f"{R}/logs/run_settings/{{run}}.log",
    conda:
        "../envs/oar.yaml"
    params:
        settings=lambda wc: RUNS[wc.run],
    script:
        "../workflow_scripts/run_settings.py"


rule train:
    input:
        settings=rules.run_settings.output.settings,
        model=lambda wc: model_dir(model_of(wc.run)),
        train_file=data_file(config["training"]["dataset"]),
    output:
        done=f"{R}/runs/{{run}}/done",
        model=directory(f"{R}/runs/{{run}}/model"),
        metrics=f"{R}/runs/{{run}}/metrics.jsonl",
        weights=f"{R}/runs/{{run}}/weights_delta.json",
    log:
        f"{R}/logs/train/{{run}}.log",
    benchmark:
        f"{R}/timings/train/{{run}}.tsv"
    # a retry resumes from the run's newest checkpoint (checkpoints/ is no output: a failed attempt keeps it)
    retries: rule_retries("train")
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("train")
    resources:
        **rule_resources("train"),
    params:
        script=f"{SCRIPTS}/train.py",
        launcher=lambda wc: REG.jobs.launcher(model_of(wc.run)),
    shell:
        "OMP_NUM_THREADS={threads} {params.launcher} {params.script} --settings {input.settings:q}"
        " --out-dir $(dirname {output.done:q}) > {log} 2>&1"
