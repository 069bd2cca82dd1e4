"""Analysis jobs of the workflow (Snakemake ``script:`` only; the science is in ``oar.analysis``).

``params.kind`` selects the job:

- ``accuracy``: evaluation summaries of a registry group -> one CSV row per (run, benchmark);
- ``credit``: ``metrics.jsonl`` and ``weights_delta.json`` of a group's runs -> training curves (long CSV)
  and a per-run summary (with whether each run trained at all);
- ``cost``: training curves -> median step time per method and its ratio to GRPO;
- ``recall``: oracle causal tokens + held-out scores -> causal-token recall per scorer (JSON); on the
  chain task also against the decisive tokens parsed from each response, with the oracle's agreement;
- ``paired``: the main group's accuracy and training curves -> per-seed outcomes and each method's
  paired differences from the baseline (CSV);
- ``fidelity``: held-out scores -> Spearman and top-10% overlap of each scorer with OAR-P (JSON).
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402

from oar.files import atomic_open, atomic_write_json  # noqa: E402

# Under Snakemake this is the job's `snakemake` object; from the shell (--help included) it exits
# here, before the heavy imports below.
smk = snakemake_only(globals(), "analyze.py", "the functions are in oar.analysis") if __name__ == "__main__" else None

from oar.analysis.causal_recall import causal_recall  # noqa: E402
from oar.analysis.chain_truth import ground_truth_tokens, oracle_agreement, step_attribution  # noqa: E402
from oar.analysis.cost import cost_summary  # noqa: E402
from oar.analysis.credit import credit_summary  # noqa: E402
from oar.analysis.fidelity import proxy_fidelity  # noqa: E402
from oar.analysis.outcomes import per_seed_outcomes  # noqa: E402
from oar.analysis.paired import paired_differences  # noqa: E402
from oar.analysis.run_outputs import accuracy_frame, training_curves  # noqa: E402
from oar.files import read_jsonl  # noqa: E402


def _clean(obj):
    """JSON-safe: nan/inf -> None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _write_csv(frame, path):
    with atomic_open(path) as f:
        frame.to_csv(f, index=False)


def _run_of(path: str, depth: int) -> str:
    """Run id ("<model>/<spec>") of ``.../<model>/<spec>/<depth path parts>``."""
    parts = Path(path).parts
    return "/".join(parts[len(parts) - depth - 2 : len(parts) - depth])


def accuracy(smk):
    summaries = {}
    for path in smk.input.summaries:
        run = _run_of(path, 2)
        summaries[(run, Path(path).parent.name)] = path
    frame = accuracy_frame(smk.params.runs, summaries)
    _write_csv(frame, smk.output.csv)
    print(f"{len(frame)} (run, benchmark) rows -> {smk.output.csv}")


def credit(smk):
    import json

    metrics = {_run_of(p, 1): p for p in smk.input.metrics}
    weights = {_run_of(p, 1): json.loads(Path(p).read_text()) for p in smk.input.weights}
    curves = training_curves(smk.params.runs, metrics)
    _write_csv(curves, smk.output.curves)
    _write_csv(credit_summary(curves, weights), smk.output.summary)
    print(f"{len(curves)} logged steps of {len(metrics)} runs -> {smk.output.curves}")


def cost(smk):
    import pandas as pd

    frame = cost_summary(pd.read_csv(smk.input.curves))
    _write_csv(frame, smk.output.csv)
    print(frame.to_string(index=False))


def recall(smk):
    oracle = read_jsonl(smk.input.oracle)
    scores = {s: read_jsonl(p) for s, p in zip(smk.params.scorers, smk.input.scores)}
    result = causal_recall(oracle, scores, smk.params.fraction)
    result["probe"] = smk.params.probe
    if smk.params.ground_truth:
        # the chain task: every scorer and the oracle against the decisive tokens parsed from each response
        truth = ground_truth_tokens(read_jsonl(smk.input.responses))
        result["ground_truth"] = causal_recall(truth, scores, smk.params.fraction)
        result["ground_truth"]["oracle_agreement"] = oracle_agreement(oracle, truth)
        # credit per chain step, and the weight on the first erring relation of wrong responses
        result["ground_truth"]["steps"] = step_attribution(
            read_jsonl(smk.input.responses), scores, smk.params.fraction, smk.params.gate)
    atomic_write_json(smk.output.json, _clean(result))
    for name, s in result["summary"].items():
        print(f"{name:10s} recall@10% = {s['mean']:.3f} (n = {s['n']})")
    for name, s in result.get("ground_truth", {}).get("summary", {}).items():
        print(f"{name:10s} recall@10% against the parsed decisive tokens = {s['mean']:.3f} (n = {s['n']})")


def fidelity(smk):
    names = [smk.params.reference, *smk.params.scorers]
    files = iter(smk.input.scores)
    by_probe = {}
    for probe in smk.params.probes:
        rows = {name: read_jsonl(next(files)) for name in names}
        result = proxy_fidelity(rows[smk.params.reference], {n: rows[n] for n in smk.params.scorers},
                                smk.params.fraction)
        result["wall_s"] = {n: sum(r.get("wall_s", 0.0) for r in rows[n]) for n in names}
        by_probe[probe] = result
    atomic_write_json(smk.output.json, _clean({"reference": smk.params.reference, "probes": by_probe}))
    print(f"fidelity of {', '.join(smk.params.scorers)} against {smk.params.reference} -> {smk.output.json}")


def paired(smk):
    import pandas as pd

    p = smk.params
    outcomes = per_seed_outcomes(pd.read_csv(smk.input.accuracy), pd.read_csv(smk.input.curves),
                                 p.benchmark, p.reward_threshold, p.window, p.reward_gain)
    differences = paired_differences(outcomes, p.baseline, primary=p.primary)
    _write_csv(outcomes, smk.output.outcomes)
    _write_csv(differences, smk.output.differences)
    print(differences.to_string(index=False))


JOBS = {"paired": paired, "accuracy": accuracy, "credit": credit, "cost": cost, "recall": recall, "fidelity": fidelity}

if __name__ == "__main__":
    JOBS[smk.params.kind](smk)
