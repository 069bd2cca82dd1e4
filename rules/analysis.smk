# Analysis: accuracy and credit metrics per registry group (from the evaluation summaries and each
# run's metrics.jsonl), training cost, and the held-out study of method.md section 8: one fixed set of
# base-model responses, sampled once, scored by every scorer, with oracle causal tokens found by pad
# substitution and greedy re-decoding.

# How the held-out scripts grade a response and build its probes, the same for all three (heldout.py,
# oracle_tokens.py, score_heldout.py; their options from workflow_scripts/_script_io.model_script_parser).
HELDOUT_GRADING = dict(
    no_fallback_last_number=not config["grading"]["last_number"],
    no_answer_statement=not config["grading"]["answer_statement"],
    appended_conclusion=not config["training"]["oar"]["own_conclusion"],
    substitute=config["training"]["oar"]["substitute"],
    # the outcome settings where the config sets them (at their maths defaults the scripts' own defaults hold)
    **{
        key: value
        for key in ("conclusion", "answer_pattern", "answer_finder")
        if (value := config["training"]["oar"].get(key, getattr(OARSettings, key)))
        != getattr(OARSettings, key)
    },
)


rule accuracy:
    input:
        summaries=lambda wc: summaries(eval_runs(wc.group), group_benchmarks(wc.group)),
    output:
        csv=f"{R}/analysis/accuracy/{{group}}.csv",
    log:
        f"{R}/logs/analysis/accuracy-{{group}}.log",
    benchmark:
        f"{R}/timings/analysis/accuracy-{{group}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="accuracy",
        runs=lambda wc: run_meta(eval_runs(wc.group)),
        benchmarks=lambda wc: group_benchmarks(wc.group),
    script:
        "../workflow_scripts/analyze.py"


rule credit:
    input:
        metrics=lambda wc: metrics_files(GROUPS[wc.group]),
        weights=lambda wc: [
            f"{R}/runs/{run}/weights_delta.json" for run in GROUPS[wc.group]
        ],
    output:
        curves=f"{R}/analysis/credit/{{group}}.csv",
        summary=f"{R}/analysis/credit/{{group}}.summary.csv",
    log:
        f"{R}/logs/analysis/credit-{{group}}.log",
    benchmark:
        f"{R}/timings/analysis/credit-{{group}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="credit",
        runs=lambda wc: run_meta(GROUPS[wc.group]),
    script:
        "../workflow_scripts/analyze.py"


rule cost_summary:
    input:
        curves=f"{R}/analysis/credit/{COST_GROUP}.csv",
    output:
        csv=f"{R}/analysis/cost.csv",
    log:
        f"{R}/logs/analysis/cost.log",
    benchmark:
        f"{R}/timings/analysis/cost.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="cost",
    script:
        "../workflow_scripts/analyze.py"


rule heldout_responses:
    input:
        model=model_dir(analysis_model()),
        problems=data_file(config["analysis"]["heldout"]["dataset"]),
    output:
        responses=f"{R}/analysis/heldout/responses.jsonl",
    log:
        f"{R}/logs/analysis/heldout_responses.log",
    benchmark:
        f"{R}/timings/analysis/heldout_responses.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("heldout")
    resources:
        **rule_resources("heldout"),
    params:
        **HELDOUT_GRADING,
        offset=config["analysis"]["heldout"]["offset"],
        num_problems=config["analysis"]["heldout"]["num_problems"],
        temperature=config["analysis"]["heldout"]["temperature"],
        max_new_tokens=config["analysis"]["heldout"]["max_new_tokens"],
        seed=config["analysis"]["heldout"]["seed"],
        min_reasoning_tokens=config["analysis"]["heldout"]["min_reasoning_tokens"],
        keep_unanswered=not config["analysis"]["heldout"]["require_answer"],
        keep_truncated=not config["analysis"]["heldout"]["require_complete"],
        max_responses=config["analysis"]["heldout"]["max_responses"],
        threads=lambda wc, threads: threads,
    script:
        "../workflow_scripts/heldout.py"


rule oracle:
    input:
        model=model_dir(analysis_model()),
        responses=rules.heldout_responses.output.responses,
    output:
        oracle=f"{R}/analysis/heldout/oracle.jsonl",
    log:
        f"{R}/logs/analysis/oracle.log",
    benchmark:
        f"{R}/timings/analysis/oracle.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("oracle")
    resources:
        **rule_resources("oracle"),
    params:
        **HELDOUT_GRADING,
        slack_tokens=config["analysis"]["oracle"]["slack_tokens"],
        max_new_tokens=config["analysis"]["oracle"]["max_new_tokens"],
        batch_size=config["analysis"]["oracle"]["batch_size"],
        reference=config["analysis"]["oracle"]["reference"],
        intervention=config["analysis"]["oracle"]["intervention"],
        threads=lambda wc, threads: threads,
    script:
        "../workflow_scripts/oracle_tokens.py"


rule score_heldout:
    input:
        model=model_dir(analysis_model()),
        responses=rules.heldout_responses.output.responses,
    output:
        scores=f"{R}/analysis/heldout/scores/{{scorer}}-{{probe}}.jsonl",
    log:
        f"{R}/logs/analysis/score-{{scorer}}-{{probe}}.log",
    benchmark:
        f"{R}/timings/analysis/score-{{scorer}}-{{probe}}.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("score")
    resources:
        **rule_resources("score"),
    params:
        # the scorer settings of training.oar (a setting added later only off its default: scores made
        # before it existed stay valid)
        **REG.scorer_options(),
        **HELDOUT_GRADING,
        scorer=lambda wc: wc.scorer,
        probe=lambda wc: wc.probe,
        seed=config["analysis"]["heldout"]["seed"],
        threads=lambda wc, threads: threads,
    script:
        "../workflow_scripts/score_heldout.py"


rule recall_analysis:
    input:
        oracle=rules.oracle.output.oracle,
        responses=rules.heldout_responses.output.responses,
        scores=[score_file(s, RECALL["probe"]) for s in RECALL["scorers"]],
    output:
        json=f"{R}/analysis/causal_recall.json",
    log:
        f"{R}/logs/analysis/causal_recall.log",
    benchmark:
        f"{R}/timings/analysis/causal_recall.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="recall",
        ground_truth=REG.has_ground_truth(),
        gate={k: config["training"]["oar"][k] for k in ("tau", "beta", "floor")},
        scorers=RECALL["scorers"],
        probe=RECALL["probe"],
        fraction=RECALL["fraction"],
    script:
        "../workflow_scripts/analyze.py"


rule fidelity_analysis:
    input:
        scores=[
            score_file(s, p)
            for p in FIDELITY["probes"]
            for s in [FIDELITY["reference"], *FIDELITY["scorers"]]
        ],
    output:
        json=f"{R}/analysis/fidelity.json",
    log:
        f"{R}/logs/analysis/fidelity.log",
    benchmark:
        f"{R}/timings/analysis/fidelity.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="fidelity",
        reference=FIDELITY["reference"],
        scorers=FIDELITY["scorers"],
        probes=FIDELITY["probes"],
        fraction=FIDELITY["fraction"],
    script:
        "../workflow_scripts/analyze.py"


rule paired_analysis:
    input:
        accuracy=f"{R}/analysis/accuracy/main.csv",
        curves=f"{R}/analysis/credit/main.csv",
    output:
        outcomes=f"{R}/analysis/paired/outcomes.csv",
        differences=f"{R}/analysis/paired/differences.csv",
    log:
        f"{R}/logs/analysis/paired.log",
    benchmark:
        f"{R}/timings/analysis/paired.tsv"
    conda:
        "../envs/oar.yaml"
    threads: rule_threads("analysis")
    resources:
        **rule_resources("analysis"),
    params:
        kind="paired",
        baseline=REG.paired["baseline"],
        benchmark=REG.paired["benchmark"],
        reward_threshold=REG.paired["reward_threshold"],
        reward_gain=REG.paired.get("reward_gain"),
        window=REG.paired["window"],
        primary=REG.primary,
    script:
        "../workflow_scripts/analyze.py"
