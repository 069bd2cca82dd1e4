"""The ground-truth track's plots, from a policy's entry records (``python -m oar.bench plot``).

- ``leaderboard.png`` (and ``.pdf``): three panels, each entry's recall@10%, average precision and
  first-error localisation with its 95% interval (problems as clusters), entries in the table's order
  (by average precision), chance as a dashed line; an entry that reads the answer key is marked with a
  dagger and drawn grey.
- ``steps.png`` (and ``.pdf``): per chain step, the share of its decisive tokens each entry puts in the
  top 10%, with chance's share: where along the chain an entry puts its credit.

Written beside the entries' JSON files, atomically, with fixed metadata (the same records give the same
bytes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oar.analysis.figures import COLORS, plt, save
from oar.bench.leaderboard import GROUND_TRUTH_MARK

PANELS = (("recall", "recall@10%"), ("average_precision", "average precision"),
          ("first_error", "first error located"))


def _summary(entry: Mapping[str, Any], metric: str) -> Mapping[str, Any]:
    result = entry["result"]
    return result.get("step_level", {}).get(metric, {}) if metric == "first_error" else result[metric]


def _chance(entry: Mapping[str, Any], metric: str) -> float:
    result = entry["result"]
    if metric == "first_error":
        return result.get("step_level", {}).get("chance_first_error", math.nan)
    return result["chance"][metric]


def _label(entry: Mapping[str, Any]) -> str:
    return entry["entry"] + (GROUND_TRUTH_MARK if entry.get("ground_truth") else "")


def colours(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The project's colour for the methods it has one for (oar.analysis.figures), a distinct one of
    tab20 for each other entry; grey for an entry that reads the answer key."""
    taken = set(COLORS.values())
    spare = [c for c in (plt.get_cmap("tab20")(i) for i in range(20))
             if "#%02x%02x%02x" % tuple(int(255 * v) for v in c[:3]) not in taken]
    out, free = {}, iter(spare * (len(entries) // max(len(spare), 1) + 1))
    for e in entries:
        name = e["entry"]
        out[name] = "#999999" if e.get("ground_truth") else COLORS.get(name) or next(free)
    return out


def ranked(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The table's order: by average precision, highest first."""
    return sorted(entries, key=lambda e: -e["result"]["average_precision"]["mean"])


def leaderboard_plot(entries: Sequence[Mapping[str, Any]], paths: Sequence[str | Path]) -> None:
    """Each entry's recall, average precision and first-error localisation with intervals, chance dashed."""
    order = ranked(entries)
    colour = colours(order)
    y = list(range(len(order)))[::-1]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 0.35 * len(order) + 1.6), sharey=True)
    for ax, (metric, title) in zip(axes, PANELS):
        for yi, e in zip(y, order):
            s = _summary(e, metric)
            mean, low, high = (s.get(k, math.nan) for k in ("mean", "ci_low", "ci_high"))
            if mean is None or math.isnan(mean):
                continue
            color = colour[e["entry"]]
            error = None if low is None or math.isnan(low) else [[mean - low], [high - mean]]
            ax.errorbar([mean], [yi], xerr=error, fmt="o", color=color, capsize=3, ms=4)
        chance = _chance(order[0], metric)
        if chance is not None and not math.isnan(chance):
            ax.axvline(chance, color="black", ls="--", lw=1, label=f"chance ({chance:.2f})")
            ax.legend(frameon=False, fontsize=7, loc="lower right")
        ax.set_xlim(-0.02, 1.02)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, [_label(e) for e in order], fontsize=8)
    first = order[0]
    fig.suptitle(f"token-credit benchmark v{first['version']}, {first['policy']}: means and 95% intervals "
                 f"({first['result']['ranked']} responses)", fontsize=10)
    fig.tight_layout()
    save(fig, paths)


def steps_plot(entries: Sequence[Mapping[str, Any]], paths: Sequence[str | Path]) -> None:
    """Per chain step, the share of its decisive tokens in each entry's top 10%, with chance's."""
    order = ranked(entries)
    colour = colours(order)
    steps = sorted({int(k) for e in order for k in e["result"]["step_recall"]})
    fig, ax = plt.subplots(figsize=(1.6 * len(steps) + 4, 3.8))
    for e in order:
        means = [e["result"]["step_recall"].get(str(k), {}).get("mean", math.nan) for k in steps]
        ax.plot(steps, means, marker="o", lw=1.2, label=_label(e), color=colour[e["entry"]],
                ls=":" if e.get("ground_truth") else "-")
    ax.axhline(order[0]["result"]["chance"]["step_recall"], color="black", ls="--", lw=1, label="chance")
    ax.set_xticks(steps, [f"step {k}" for k in steps])
    ax.set_ylabel("share of the step's decisive tokens in the top 10%")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title(f"where along the chain the credit goes ({order[0]['policy']})", fontsize=10)
    fig.tight_layout()
    save(fig, paths)


def write_plots(entries: Sequence[Mapping[str, Any]], where: str | Path) -> list[Path]:
    """Both plots of a policy's entries into ``where`` (PNG and PDF); returns the paths written."""
    where = Path(where)
    board = [where / "leaderboard.png", where / "leaderboard.pdf"]
    steps = [where / "steps.png", where / "steps.pdf"]
    leaderboard_plot(entries, board)
    steps_plot(entries, steps)
    return [*board, *steps]
