"""The workflow's figures: data in, PNG and PDF files out (matplotlib, Agg backend).

Each function takes plain frames or dicts (as the analysis jobs write them) and output paths, draws one
figure, and saves it to every path given (the format follows the suffix), each to a temporary name that
is renamed when complete.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from oar.analysis.labels import METHOD_NAMES, in_method_order  # noqa: E402
from oar.analysis.outcomes import censored_steps  # noqa: E402
from oar.analysis.statistics import seed_interval  # noqa: E402
from oar.files import atomic_open  # noqa: E402

COLORS = {"grpo": "#555555", "truth": "#000000", "truth_graded": "#7f7f7f", "truth_final": "#e377c2",
          "truth_early": "#bcbd22", "oar_p": "#d62728", "oar_g": "#1f77b4", "grad_norm": "#9467bd",
          "entropy": "#2ca02c", "position": "#ff7f0e", "random": "#8c564b"}


def save(fig, paths: Sequence[str | os.PathLike]) -> None:
    """Save ``fig`` to every path, in the format its suffix names, then close it."""
    for path in paths:
        path = Path(path)
        # fixed metadata so that reruns of the same data give the same PDF bytes
        metadata = {"CreationDate": None} if path.suffix == ".pdf" else {"Software": None}
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format=path.suffix[1:], dpi=150, bbox_inches="tight", metadata=metadata)
    plt.close(fig)


CURVE_PANELS = (("reward", "reward"), ("entropy", "policy entropy"), ("ess_ratio", "ESS ratio of token weights"),
                ("top_mass", "top-10% advantage mass"))


def training_curves(curves: pd.DataFrame, paths: Sequence[str | os.PathLike]) -> None:
    """2 x 2 panels (reward, entropy, ESS ratio, top-10% mass) against the step, one line per method
    (mean over seeds; a band for min-max over seeds where there are several), one figure row of panels per
    model when there are several models."""
    models = list(dict.fromkeys(curves["model"])) or ["(none)"]
    fig, axes = plt.subplots(2 * len(models), 2, figsize=(10, 6.5 * len(models)), squeeze=False)
    for mi, model in enumerate(models):
        data = curves[curves["model"] == model]
        for pi, (key, title) in enumerate(CURVE_PANELS):
            ax = axes[2 * mi + pi // 2, pi % 2]
            drawn = False
            for method in in_method_order(data["method"].unique()):
                g = data[data["method"] == method]
                by_step = g.groupby("step")[key]
                mean = by_step.mean()
                if mean.isna().all():
                    continue
                color = COLORS.get(method)
                drawn = True
                ax.plot(mean.index, mean.values, marker="o", ms=3, label=METHOD_NAMES.get(method, method), color=color)
                if g["seed"].nunique() > 1:
                    ax.fill_between(mean.index, by_step.min().values, by_step.max().values, alpha=0.15, color=color)
            if not drawn:
                ax.text(0.5, 0.5, "undefined at every step\n(e.g. every advantage was 0)", ha="center",
                        va="center", transform=ax.transAxes, fontsize=9, color="#777777")
            ax.set_title(title + (f" ({model})" if len(models) > 1 else ""), fontsize=10)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=min(len(handles), 7),
                   frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    save(fig, paths)


def grid_heatmap(acc: pd.DataFrame, benchmarks: Sequence[str], paths: Sequence[str | os.PathLike]) -> None:
    """Average accuracy (%) over benchmarks for each (tau, beta), mean over seeds; one panel per
    (model, method)."""
    data = acc[~acc["method"].isin(["base", "grpo"])]
    per_run = (data[data["benchmark"].isin(benchmarks)].groupby(["model", "method", "tau", "beta", "seed"])["pass@1"]
               .mean().reset_index())
    panels = list(per_run.groupby(["model", "method"], sort=False))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.5 * max(1, len(panels)), 3.8), squeeze=False)
    for ax, ((model, method), g) in zip(axes[0], panels):
        cell = g.groupby(["tau", "beta"])["pass@1"].mean() * 100
        taus, betas = sorted(g["tau"].unique()), sorted(g["beta"].unique())
        matrix = np.array([[cell.get((t, b), np.nan) for b in betas] for t in taus])
        im = ax.imshow(matrix, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(betas)), [f"{b:g}" for b in betas])
        ax.set_yticks(range(len(taus)), [f"{t:g}" for t in taus])
        ax.set_xlabel("beta")
        ax.set_ylabel("tau")
        ax.set_title(f"{METHOD_NAMES.get(method, method)} ({model})", fontsize=10)
        finite = matrix[np.isfinite(matrix)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0
        for i in range(len(taus)):
            for j in range(len(betas)):
                if np.isfinite(matrix[i, j]):
                    ax.text(j, i, f"{matrix[i, j]:.1f}", ha="center", va="center", fontsize=9,
                            color="white" if matrix[i, j] < mid else "black")
        fig.colorbar(im, ax=ax, label="average accuracy (%)")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no grid runs", ha="center", va="center")
    fig.tight_layout()
    save(fig, paths)


def recall_bars(recall: Mapping[str, Any], paths: Sequence[str | os.PathLike]) -> None:
    """Causal-token recall@10% per scorer (mean and standard error over responses), then the trivial
    orders (earliest / latest tokens first, hatched), with the chance line."""
    baselines = recall.get("baselines") or {}
    spreads = {**recall["summary"], **baselines}
    names = [*in_method_order(list(recall["summary"])), *baselines]
    means = [spreads[n]["mean"] for n in names]
    sems = [spreads[n]["sem"] for n in names]
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 2, 3.6))
    x = np.arange(len(names))
    ax.bar(x, [m if m is not None else np.nan for m in means],
           yerr=[s if s is not None and not math.isnan(s) else 0 for s in sems], capsize=3,
           color=[COLORS.get(n, "#777777") for n in names],
           hatch=["//" if n in baselines else "" for n in names], edgecolor="white")
    chance = (recall.get("chance") or {}).get("mean")
    if chance is not None and not math.isnan(chance):
        ax.axhline(chance, color="black", ls="--", lw=1, label=f"chance ({chance:.2f})")
        ax.legend(frameon=False, fontsize=8)
    labels = {"earliest_first": "earliest\nfirst", "latest_first": "latest\nfirst"}
    ax.set_xticks(x, [labels.get(n, METHOD_NAMES.get(n, n)) for n in names])
    ax.set_ylabel("recall@10%")
    ax.set_ylim(0, 1.05)
    n = max((spreads[k]["n"] for k in names), default=0)
    ax.set_title(f"oracle causal-token recall ({n} responses)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save(fig, paths)


def cost_bars(cost: pd.DataFrame, paths: Sequence[str | os.PathLike]) -> None:
    """Median step time per method, stacked as generate / score / update, with the ratio to GRPO."""
    models = list(dict.fromkeys(cost["model"]))
    fig, axes = plt.subplots(1, max(1, len(models)),
                             figsize=(1.0 * cost["method"].nunique() + 3, 3.8) if len(models) <= 1
                             else (5 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes[0], models):
        g = cost[cost["model"] == model].set_index("method").loc[
            in_method_order(cost[cost["model"] == model]["method"])]
        x = np.arange(len(g))
        bottom = np.zeros(len(g))
        for part, color in (("time_generate_s", "#9ecae1"), ("time_score_s", "#fc9272"), ("time_update_s", "#a1d99b")):
            values = g[part].fillna(0).to_numpy(dtype=float)
            ax.bar(x, values, bottom=bottom, color=color, label=part.removeprefix("time_").removesuffix("_s"))
            bottom += values
        total = g["step_time_s"].to_numpy(dtype=float)
        ax.scatter(x, total, color="black", marker="_", s=200, zorder=3, label="step (median)")
        for xi, (t, r) in enumerate(zip(total, g["ratio_to_grpo"])):
            if np.isfinite(t):
                ax.text(xi, t, f"{r:.2f}x" if np.isfinite(r) else "", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [METHOD_NAMES.get(m, m) for m in g.index], rotation=30, ha="right")
        ax.set_ylabel("seconds per training step")
        ax.set_title(f"training cost ({model})", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(frameon=False, fontsize=8)
    fig.tight_layout()
    save(fig, paths)


def normalised(scores: Sequence[float]) -> np.ndarray:
    """log(1 + s) scaled to [0, 1] per response, as the gate sees the scores (constant -> 0)."""
    s = np.log1p(np.clip(np.asarray(scores, dtype=float), 0, None))
    span = s.max() - s.min() if len(s) else 0
    return (s - s.min()) / span if span > 0 else np.zeros_like(s)


def token_heatmap(tokens: Sequence[str], scores: Mapping[str, Sequence[float]], paths: Sequence[str | os.PathLike],
                  weights: Sequence[float] | None = None, weights_label: str = "gate weight",
                  title: str = "") -> None:
    """One column per scorer (normalised importance) and optionally the gate's weights, one row per
    reasoning token, labelled with the token's text."""
    names = list(scores)
    columns = [normalised(scores[n]) for n in names]
    labels = [METHOD_NAMES.get(n, n) for n in names]
    n_tok = len(tokens)
    width = len(columns) + (1 if weights is not None else 0)
    fig, axes = plt.subplots(1, width, figsize=(1.4 * width + 1.6, 0.19 * n_tok + 1.4), sharey=True, squeeze=False)
    shown = [repr(t)[1:-1][:18] for t in tokens]
    image = None
    for i, (ax, col, label) in enumerate(zip(axes[0], columns, labels)):
        image = ax.imshow(col[:, None], cmap="magma_r", aspect="auto", vmin=0, vmax=1)
        ax.set_xticks([0], [label])
        ax.xaxis.tick_top()
        if i == 0:
            ax.set_yticks(range(n_tok), shown, fontsize=7, family="monospace")
    if weights is not None:
        ax = axes[0, -1]
        w = np.asarray(weights, dtype=float)
        ax.barh(range(n_tok), w, color="#d62728", height=0.8)
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel(weights_label, fontsize=8)
        ax.xaxis.set_label_position("top")
        ax.set_ylim(n_tok - 0.5, -0.5)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    if image is not None:  # a colour bar under the heatmap columns, in a margin of its own
        height = fig.get_figheight()
        fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.7 / height)
        first, last = axes[0][0].get_position(), axes[0][len(columns) - 1].get_position()
        cax = fig.add_axes((first.x0, 0.25 / height, last.x1 - first.x0, 0.12 / height))
        fig.colorbar(image, cax=cax, orientation="horizontal",
                     label="importance: log(1 + s) scaled to [0, 1] per scorer (dark = high)")
    save(fig, paths)


def _interval(values) -> tuple[float, float, float]:
    return seed_interval(list(values))


def main_comparison(curves: pd.DataFrame, outcomes: pd.DataFrame, paths: Sequence[str | os.PathLike],
                    benchmark: str = "held-out", base: Mapping[str, float] | None = None) -> None:
    """Per model, two panels: the training reward against the step (mean over seeds, 95% band), and the
    final held-out accuracy of every seed with the mean and its 95% interval, one column per method.
    ``base`` (model -> accuracy, 0-1) draws the untrained policy's accuracy as a dashed line."""
    models = list(dict.fromkeys(outcomes["model"]))
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.8 * len(models)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.6, 1]})
    for mi, model in enumerate(models):
        ax = axes[mi, 0]
        data = curves[curves["model"] == model]
        for method in in_method_order(data["method"].unique()):
            g = data[data["method"] == method].pivot_table(index="step", columns="seed", values="reward")
            stats = [_interval(row.dropna()) for _, row in g.iterrows()]
            mean = [m for m, _, _ in stats]
            color = COLORS.get(method)
            ax.plot(g.index, mean, label=f"{METHOD_NAMES.get(method, method)} ({g.shape[1]} seeds)", color=color)
            ax.fill_between(g.index, [lo for _, lo, _ in stats], [hi for _, _, hi in stats], alpha=0.15, color=color)
        ax.set_title(f"training reward ({model})", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("mean reward (95% band over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
        ax = axes[mi, 1]
        o = outcomes[outcomes["model"] == model]
        methods = in_method_order(o["method"].unique())
        for x, method in enumerate(methods):
            v = o[o["method"] == method]["final_accuracy"] * 100
            mean, low, high = _interval(v)
            color = COLORS.get(method)
            ax.scatter([x] * len(v), v, color=color, alpha=0.5, s=14)
            ax.errorbar([x + 0.18], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color=color, capsize=4)
        if base and model in base:
            ax.axhline(base[model] * 100, color="grey", linestyle="--", linewidth=1)
            ax.annotate("base policy", (len(methods) - 0.5, base[model] * 100), fontsize=8, color="grey",
                        ha="right", va="bottom")
        ax.set_xticks(range(len(methods)), [METHOD_NAMES.get(m, m) for m in methods])
        ax.set_xlim(-0.5, len(methods) - 0.5)
        ax.set_title(f"{benchmark} accuracy after training ({model})", fontsize=10)
        ax.set_ylabel("accuracy, % (dots: seeds; bar: 95% CI)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save(fig, paths)


def length_sweep(outcomes: pd.DataFrame, paths: Sequence[str | os.PathLike], labels: Mapping[str, str] | None = None,
                 base: Mapping[str, float] | None = None) -> None:
    """Final accuracy (95% intervals over seeds) and steps to the reward threshold against the response
    length setting (one x position per model of the sweep), one line per method. Steps are censored (a
    run may never reach the threshold), so that panel draws the Kaplan-Meier median with no interval,
    and leaves a gap where half the runs never reached it. ``base`` (model -> accuracy, 0-1) adds the
    untrained policies' accuracy as a dashed line."""
    models = list(dict.fromkeys(outcomes["model"]))
    labels = labels or {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, title in ((axes[0], "final_accuracy", "held-out accuracy after training, %"),
                           (axes[1], "steps_to_threshold",
                            "steps to the reward threshold, Kaplan-Meier median\n"
                            "(gap: half the runs never reached it)")):
        methods = in_method_order(outcomes["method"].unique())
        for k, method in enumerate(methods):
            runs = [outcomes[(outcomes["model"] == m) & (outcomes["method"] == method)] for m in models]
            if key == "final_accuracy":
                stats = [_interval(r[key] * 100) for r in runs]
            else:
                medians = [censored_steps(r)["median"] if len(r) else math.nan for r in runs]
                stats = [(v, v, v) for v in medians]
            xs = [i + (k - (len(methods) - 1) / 2) * 0.06 for i in range(len(models))]
            mean = [s[0] for s in stats]
            err = [[s[0] - s[1] for s in stats], [s[2] - s[0] for s in stats]]
            ax.errorbar(xs, mean, yerr=err, marker="o", capsize=3, label=METHOD_NAMES.get(method, method),
                        color=COLORS.get(method))
        if key == "final_accuracy" and base and all(m in base for m in models):
            ax.plot(range(len(models)), [base[m] * 100 for m in models], linestyle="--", marker="x",
                    color="grey", label="base policy")
        ax.set_xticks(range(len(models)), [labels.get(m, m) for m in models])
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    save(fig, paths)
