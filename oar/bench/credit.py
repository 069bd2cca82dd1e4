"""The ground-truth track: how well a scorer ranks the tokens that decide the answer.

Every response of a frozen policy's response set (``oar.bench.response_set``) is scored as training
scores it: the rows of ``GROUPS_PER_CALL`` problems per call (a training step's 16 prompts x 8), with each
row's group and reward for a scorer that reads them, the frozen policy as the reference model, and the
call's seed. The first call is scored twice before the others: a scorer whose two scores for one seed
differ stops, as does one whose output breaks the scorer contract (NaN, a row of another length than the
reasoning: named by problem and sample), one that raises (named with the exception and the call), and one
that leaves the policy or the reference model changed after its entry (an exact digest of their
parameters, buffers and hooks, ``oar.method.weight_fingerprint.ModelDigest``). A scorer is handed only
what it declares (``oar.method.importance.score``): the parsed positions below are the answer key, and an
entry that reads them is marked ``ground_truth`` in its record.

Against the parsed decisive tokens of each response with at least one (every step's relation and result,
``oar.data.chains``), with tokens ranked by score and tied scores counted as the mean over their orders
(``oar.method.metrics.topk_hits``, ``average_precision``: a scorer gains nothing from ties):

- ``recall``: recall@k of the top 10% of the reasoning (k = ceil(0.1 R));
- ``step_recall``: per chain step, the share of its decisive tokens in that top 10%;
- ``average_precision``: of the whole ranking against the decisive tokens;
- ``erring``: in wrong responses whose first erring step is a sloppy one (``~``) and which have later
  right steps, the share of those later right steps' relation tokens that the erring ``~`` outranks (ties
  count half; 0.5 is a ranking that cannot tell them apart).

Beside them, under ``step_level``, the step-level scores of :mod:`oar.bench.step_level` (first-error
localisation, ProcessBench's accuracies and F1, the sign of a signed entry).

Each is a mean over responses with a 95% interval robust to the responses of one problem being alike
(:func:`oar.analysis.statistics.clustered_mean`, problems as clusters). Chance (a uniformly random
ranking, in expectation) is computed per response: recall ``k |D| / R / min(k, |D|)``, a step's share
``k / R``, average precision :func:`oar.method.metrics.expected_average_precision`, erring 0.5.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from oar.analysis.statistics import clustered_mean
from oar.bench.step_level import response_step_metrics, summarise_steps
from oar.method.metrics import average_precision, default_k, expected_average_precision, outrank_share, topk_hits

FRACTION = 0.1  # recall's top share of the reasoning
GROUPS_PER_CALL = 16  # problems per scorer call: a training step's prompts (x 8 responses)
METRICS = ("recall", "average_precision", "erring")

# Which second model an entry that reads one is given: the policy itself, or the policy trained from it by
# GRPO (PRIME's implicit reward model).
REFERENCE = {"prime": "trained"}


class BenchError(ValueError):
    """A scorer or an input the benchmark cannot rank; the message names the scorer or the file."""


# ------------------------------------------------------------------------------------ per response


def response_metrics(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any],
                     fraction: float = FRACTION, signed: bool = False) -> dict[str, Any] | None:
    """The metrics of one response's scores (one per reasoning token) against its parsed positions, with
    their chance values and the step-level ones (``oar.bench.step_level``; the sign's for a ``signed``
    scorer); None for a response without a decisive token."""
    values = np.asarray(scores, dtype=np.float64)
    r_len, decisive = int(row["reasoning_len"]), [int(i) for i in row["decisive"]]
    if len(values) != r_len:
        raise BenchError(f"{len(values)} scores for {r_len} reasoning tokens (problem {row['problem']}, "
                         f"sample {row['sample']})")
    if not decisive:
        return None
    k = default_k(r_len, fraction)
    out: dict[str, Any] = {
        "recall": topk_hits(values, decisive, k) / min(k, len(decisive)),
        "average_precision": average_precision(values, decisive),
        "chance_recall": k * len(decisive) / r_len / min(k, len(decisive)),
        "chance_average_precision": expected_average_precision(r_len, len(decisive)),
        "step_recall": {}, "chance_step": k / r_len, "erring": math.nan,
    }
    steps = row["steps"]
    for number, step in enumerate(steps, start=1):
        if step["positions"]:
            out["step_recall"][number] = topk_hits(values, step["positions"], k) / len(step["positions"])
    first = next((i for i, s in enumerate(steps) if not s["right"]), None)
    if not row["correct"] and first is not None and steps[first]["relation"] == "~" \
            and steps[first]["relation_at"] is not None:
        later = [s["relation_at"] for s in steps[first + 1 :] if s["right"] and s["relation_at"] is not None]
        if later:
            out["erring"] = outrank_share(values, steps[first]["relation_at"], later)
    out.update(response_step_metrics(values, row, signed))
    return out


def summarise(per_response: Sequence[Mapping[str, Any] | None], problems: Sequence[int],
              signed: bool = False) -> dict[str, Any]:
    """Each metric's clustered mean and interval over the responses that have one, and chance's; the
    step-level metrics under ``step_level``."""
    kept = [(m, p) for m, p in zip(per_response, problems) if m is not None]
    clusters = [p for _, p in kept]
    out: dict[str, Any] = {"responses": len(per_response), "ranked": len(kept)}
    for name in METRICS:
        out[name] = clustered_mean([m[name] for m, _ in kept], clusters)
    numbers = sorted({k for m, _ in kept for k in m["step_recall"]})
    out["step_recall"] = {str(k): clustered_mean([m["step_recall"].get(k, math.nan) for m, _ in kept], clusters)
                          for k in numbers}
    out["chance"] = {"recall": clustered_mean([m["chance_recall"] for m, _ in kept], clusters)["mean"],
                     "average_precision": clustered_mean([m["chance_average_precision"] for m, _ in kept],
                                                         clusters)["mean"],
                     "step_recall": clustered_mean([m["chance_step"] for m, _ in kept], clusters)["mean"],
                     "erring": 0.5}
    out["step_level"] = summarise_steps([m for m, _ in kept], clusters, signed)
    return out


# ------------------------------------------------------------------------------------ scoring


def calls(groups: Sequence[int], groups_per_call: int = GROUPS_PER_CALL) -> list[list[int]]:
    """Row indices of each scorer call: the rows of ``groups_per_call`` consecutive problems."""
    order = list(dict.fromkeys(groups))
    out = []
    for start in range(0, len(order), groups_per_call):
        wanted = set(order[start : start + groups_per_call])
        out.append([i for i, g in enumerate(groups) if g in wanted])
    return out


def _where(index: int, members: Sequence[int], rows: Sequence[Mapping[str, Any]]) -> str:
    """A call in words: its index and its problems."""
    problems = sorted({int(rows[i]["problem"]) for i in members})
    span = f"{problems[0]}-{problems[-1]}" if len(problems) > 1 else f"{problems[0]}" if problems else "none"
    return f"call {index}, problems {span}"


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return (lines[0] + (" ..." if len(lines) > 1 else "")) if lines else "(no message)"


def score_rows(scorer: str, model, probes: Sequence, rows: Sequence[Mapping[str, Any]], *, config=None,
               seed: int = 0, reference_model=None, tokenizer=None, policy: str | None = None,
               groups_per_call: int = GROUPS_PER_CALL,
               log: Callable[[str], None] = print) -> tuple[list[np.ndarray], float]:
    """Every row's reasoning scores by ``scorer`` (a registered name or an import path), call by call as
    training calls it (:func:`calls`; call c seeded ``seed * 1_000_003 + c``), and the seconds one pass over
    the rows took. The first call is scored twice before the others, and a scorer whose two scores for one
    seed differ stops there. Every stop is a :class:`BenchError` of one line naming the scorer: a row that
    breaks the contract by its problem and sample, a scorer that raises by the exception and the call."""
    from oar.method.importance import score
    from oar.method.scorer_config import ScorerConfig
    from oar.method.scorer_contract import ScorerRowError
    from oar.method.scorer_registry import ScorerError, scorer_spec

    spec = scorer_spec(scorer)
    config = config or ScorerConfig()
    groups = [int(r["problem"]) for r in rows]
    rewards = [1.0 if r["correct"] else 0.0 for r in rows]

    def run(index: int, members: list[int]) -> list[np.ndarray]:
        try:
            result = score(spec, model, [probes[i] for i in members], config, seed=seed * 1_000_003 + index,
                           groups=[groups[i] for i in members], rewards=[rewards[i] for i in members],
                           reference_model=reference_model, tokenizer=tokenizer, policy=policy,
                           references=[str(rows[i]["reference"]) for i in members])
        except ScorerRowError as error:  # its row in this call: the problem and sample it is
            row = rows[members[error.row]]
            raise BenchError(f"scorer {scorer!r}, problem {row['problem']}, sample {row['sample']}: "
                             f"{error.problem}") from error
        except ScorerError as error:  # the contract's other checks name the scorer already
            raise BenchError(f"{_one_line(error)} ({_where(index, members, rows)})") from error
        except Exception as error:  # the scorer's own failure: one line, the traceback under --traceback
            raise BenchError(f"scorer {scorer!r} raised {type(error).__name__}: {_one_line(error)} "
                             f"({_where(index, members, rows)})") from error
        return [result.scores[j, : probes[i].reasoning_len].double().numpy() for j, i in enumerate(members)]

    scores: list[np.ndarray | None] = [None] * len(rows)
    batches = calls(groups, groups_per_call)
    started = time.perf_counter()
    for index, members in enumerate(batches):
        for i, values in zip(members, run(index, members)):
            scores[i] = values
        wall = time.perf_counter() - started
        if index == 0:  # the determinism check first: a nondeterministic scorer stops before the long pass
            again = run(0, members)
            differ = [rows[i] for i, values in zip(members, again) if not np.array_equal(values, scores[i])]
            if differ:
                raise BenchError(f"scorer {scorer!r} gave other scores for the same seed the second time (problem "
                                 f"{differ[0]['problem']}, sample {differ[0]['sample']}, and {len(differ) - 1} more "
                                 "rows): draw random numbers only from a generator seeded with the call's seed")
            started = time.perf_counter() - wall  # the repeat is not part of a pass's time
        log(f"{scorer}: scored {sum(s is not None for s in scores)}/{len(rows)} responses "
            f"({time.perf_counter() - started:.1f} s)")
    wall = time.perf_counter() - started
    return scores, wall  # type: ignore[return-value]


def is_signed(scorer: str) -> bool:
    """Whether ``scorer`` is registered signed (its sign is then scored too); False for an unknown name."""
    from oar.method.scorer_registry import ScorerError, scorer_spec

    try:
        return scorer_spec(scorer).signed
    except ScorerError:
        return False


def evaluate(scorer: str, scores: Sequence[np.ndarray], rows: Sequence[Mapping[str, Any]],
             fraction: float = FRACTION, signed: bool | None = None) -> dict[str, Any]:
    """The track's numbers for one scorer's scores of a response set's rows (``signed``: score the sign,
    by default where the scorer is registered signed)."""
    signed = is_signed(scorer) if signed is None else signed
    per = [response_metrics(s, r, fraction, signed) for s, r in zip(scores, rows)]
    return {"scorer": scorer, "fraction": fraction, "signed": signed,
            **summarise(per, [int(r["problem"]) for r in rows], signed)}


# ------------------------------------------------------------------------------------ one entry


def run_entry(scorer: str, policy: str, model, tokenizer, response_set, *, seed: int = 0, reference_model=None,
              config=None, groups_per_call: int = GROUPS_PER_CALL, log: Callable[[str], None] = print,
              on_scores: Callable[[list[np.ndarray]], None] | None = None) -> dict[str, Any]:
    """Score ``response_set`` (a verified :class:`oar.bench.response_set.ResponseSet`) with ``scorer`` on the
    loaded ``model`` and return its leaderboard record: the numbers, what the entry reads (``reads``, its
    sorted needs; ``ground_truth``: whether it reads the answer key) and what made them.

    The policy and the reference model are digested exactly before and after the entry
    (``oar.method.weight_fingerprint.ModelDigest``: every parameter's and buffer's bytes, every module's
    hooks); an entry that changed them stops with a :class:`BenchError` naming the scorer, and the models
    are then not fit for another entry (``python -m oar.bench credit`` loads them again). ``on_scores``
    receives every row's scores (the per-token scores file, ``oar.bench.scores_file``)."""
    from oar.bench.leaderboard import commit
    from oar.bench.response_set import BENCHMARK_VERSION
    from oar.cpu_kernels import VARIABLE, capability, cpu_model
    from oar.method.scorer_registry import ScorerError, scorer_spec
    from oar.method.weight_fingerprint import digests, first_digest_change

    try:
        spec = scorer_spec(scorer)
    except ScorerError as error:
        raise BenchError(str(error)) from None
    probes = response_set.probes(tokenizer)
    models = {"the policy": model, "the reference model": reference_model}
    before = digests(models)
    scores, seconds = score_rows(scorer, model, probes, response_set.rows, config=config, seed=seed,
                                 reference_model=reference_model, tokenizer=tokenizer, policy=policy,
                                 groups_per_call=groups_per_call, log=log)
    change = first_digest_change(before, models)
    if change is not None:
        raise BenchError(f"scorer {scorer!r} {change} during its entry: a scorer leaves the models as it found "
                         "them (oar.method.scorer_contract); its scores and every later entry's on these models "
                         "would be void")
    if on_scores is not None:
        on_scores(scores)
    kernels = capability()
    import torch

    return {"entry": scorer, "track": "credit", "version": BENCHMARK_VERSION, "policy": policy,
            "policy_sha256": response_set.policy_sha256, "response_set_sha256": response_set.sha256,
            "reads": sorted(spec.needs), "ground_truth": spec.ground_truth,
            "seed": seed, "seconds": seconds, "result": evaluate(scorer, scores, response_set.rows),
            "made_with": {**commit(), "cpu_kernels": kernels.get("capability"),
                          "mkl_branch": kernels.get("mkl_branch"), "pinned": kernels.get(VARIABLE),
                          "cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__}}
