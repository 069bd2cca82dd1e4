"""Draw one figure (PNG + PDF) from cached analysis files (Snakemake ``script:``; the figures themselves
are drawn by ``oar.analysis.figures``). The figure is the ``name`` wildcard."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402

from oar.files import read_jsonl  # noqa: E402

# Under Snakemake this is the job's `snakemake` object; from the shell (--help included) it exits
# here, before the heavy imports below.
smk = (snakemake_only(globals(), "plot.py", "the figures are drawn by oar.analysis.figures")
       if __name__ == "__main__" else None)

import pandas as pd  # noqa: E402

from oar.analysis import figures  # noqa: E402
from oar.analysis.labels import METHOD_NAMES  # noqa: E402
from oar.analysis.outcomes import base_accuracy  # noqa: E402


def _base_accuracy(smk) -> dict[str, float]:
    """Model -> the untrained policy's accuracy on the paired comparison's benchmark."""
    return base_accuracy(pd.read_csv(smk.input.accuracy), smk.params.paired_benchmark)


def token_heatmap(smk, paths):
    import torch

    from oar.method.gate import gate

    p = smk.params
    responses = read_jsonl(smk.input.responses)
    if not responses:
        raise ValueError(f"{smk.input.responses} holds no held-out response")
    row = responses[min(p.response_index, len(responses) - 1)]
    scores = {}
    for name, path in zip(p.heatmap_scorers, smk.input.scores):
        by_index = {r["index"]: r["scores"] for r in read_jsonl(path)}
        scores[name] = by_index[row["index"]]
    n = min(len(row["reasoning_tokens"]), p.max_tokens)
    first = p.heatmap_scorers[0]
    r_len = len(scores[first])
    weights = gate(torch.tensor([scores[first]], dtype=torch.float32), torch.ones(1, r_len, dtype=torch.bool),
                   p.tau, p.beta, p.floor)[0].tolist()
    title = (f"{row['problem_id']}: answer {row['answer']!r} (reference {row['reference']!r}); "
             f"first {n} of {r_len} reasoning tokens")
    figures.token_heatmap(row["reasoning_tokens"][:n], {k: v[:n] for k, v in scores.items()}, paths,
                          weights=weights[:n], weights_label=f"{METHOD_NAMES.get(first, first)} gate weight "
                          f"(tau {p.tau:g}, beta {p.beta:g})", title=title)


def draw(smk):
    name = smk.wildcards.name
    paths = [smk.output.png, smk.output.pdf]
    if name == "training_curves":
        figures.training_curves(pd.read_csv(smk.input.curves), paths)
    elif name == "grid_heatmap":
        acc = pd.read_csv(smk.input.accuracy)
        figures.grid_heatmap(acc, sorted(set(acc["benchmark"])), paths)
    elif name == "recall_bars":
        figures.recall_bars(json.loads(Path(smk.input.recall).read_text()), paths)
    elif name == "cost_bars":
        figures.cost_bars(pd.read_csv(smk.input.cost), paths)
    elif name == "main_comparison":
        figures.main_comparison(pd.read_csv(smk.input.curves), pd.read_csv(smk.input.outcomes), paths,
                                benchmark=smk.params.paired_benchmark, base=_base_accuracy(smk))
    elif name == "length_sweep":
        figures.length_sweep(pd.read_csv(smk.input.outcomes), paths, labels=smk.params.model_labels,
                             base=_base_accuracy(smk))
    elif name == "token_heatmap":
        token_heatmap(smk, paths)
    else:
        raise ValueError(f"unknown figure {name!r}")
    print(f"{name} -> {', '.join(map(str, paths))}")


if __name__ == "__main__":
    draw(smk)
