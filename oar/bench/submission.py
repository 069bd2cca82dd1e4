"""Submitting a ground-truth row, and a maintainer's check of one by rerunning it.

``python -m oar.bench submit --scorer NAME`` reads the row that ``credit --scorer NAME`` wrote (a full run:
``--problems`` writes none) and writes one JSON file (:data:`FORMAT`):

- ``record``: the entry's leaderboard record as written (numbers, versions, hashes, what made it);
- ``scores_sha256``: the content hash of its per-token scores file (``oar.bench.scores_file``);
- ``scorer``: the name it ran under, the import path of the function that ran, the sha256 of that
  function's source and of its module's file, whether it is signed and what it reads;
- ``command``: the command that reproduces the row.

``python -m oar.bench verify FILE`` checks the file's benchmark version and hashes against the shipped
policy and response set, that the scorer importable here has the submitted function source, then scores the set
again with the record's seed and compares the scores' hash and every number of the result. Equal on the
kind of CPU that made the row (the record names its kernels); on another kind a model-reading entry's
scores may differ in the last bits, and the verdict says which numbers moved.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from oar.files import atomic_write_json

FORMAT = 1


class SubmissionError(ValueError):
    """A submission that cannot be written or read; the message names the file or the entry."""


def _sha256(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()


def scorer_identity(name: str) -> dict[str, Any]:
    """The scorer under ``name``: its function's import path, the sha256 of the function's own source
    (``code_sha256``, what verify requires to match) and of its module's file (``file_sha256``: a change
    elsewhere in the module, which the function may call, is reported), signed, needs."""
    from oar.method.scorer_registry import scorer_spec

    spec = scorer_spec(name)
    function = spec.function
    try:
        code = _sha256(inspect.getsource(function).encode("utf-8"))
    except (OSError, TypeError):  # no source to read (a builtin, a lambda typed in a shell)
        code = None
    source = inspect.getsourcefile(function)
    return {"name": name, "import_path": f"{function.__module__}:{function.__qualname__}", "code_sha256": code,
            "file_sha256": _sha256(Path(source).read_bytes()) if source else None, "signed": bool(spec.signed),
            "needs": sorted(spec.needs)}


def submission_of(record: Mapping[str, Any], scores_sha256: str) -> dict[str, Any]:
    entry = record["entry"]
    return {"submission_format": FORMAT, "record": dict(record), "scores_sha256": scores_sha256,
            "scorer": scorer_identity(entry),
            "command": f"python -m oar.bench credit --scorer {entry} --policy {record['policy']} "
                       f"--seed {record['seed']}"}


def write_submission(out: str | Path, policy: str, version: int, entry: str, to: str | Path | None = None) -> Path:
    """Write the submission of ``entry``'s row in ``out`` (checking its scores file against the record)."""
    from oar.bench import scores_file
    from oar.bench.leaderboard import entry_slug, folder

    path = folder(out, "credit", policy, version) / f"{entry_slug(entry)}.json"
    if not path.is_file():
        raise SubmissionError(f"{path}: no row of {entry!r} (run `python -m oar.bench credit --scorer {entry} "
                              f"--policy {policy} --out {out}` on the whole set first: --problems writes no row)")
    record = json.loads(path.read_text(encoding="utf-8"))
    if "scores" not in record:
        raise SubmissionError(f"{path}: the row names no per-token scores file (written by an older version)")
    digest = scores_file.content_sha256(scores_file.read(path.with_name(record["scores"]["file"])))
    if digest != record["scores"]["sha256"]:
        raise SubmissionError(f"{path.with_name(record['scores']['file'])}: its scores hash {digest[:16]}..., the row "
                              f"says {record['scores']['sha256'][:16]}...")
    target = Path(to) if to else Path(f"submission-{policy}-{entry_slug(entry)}.json")
    atomic_write_json(target, submission_of(record, digest))
    return target


def read_submission(file: str | Path) -> dict[str, Any]:
    file = Path(file)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SubmissionError(f"{file}: not a readable JSON file ({error})") from None
    missing = [k for k in ("submission_format", "record", "scores_sha256", "scorer") if k not in data]
    if missing:
        raise SubmissionError(f"{file}: not a submission (missing {', '.join(missing)})")
    if data["submission_format"] != FORMAT:
        raise SubmissionError(f"{file}: submission format {data['submission_format']}, this checkout reads {FORMAT}")
    return data


def differences(submitted: Any, rerun: Any, where: str = "result") -> list[str]:
    """The paths of the numbers that differ between two results (nan equals nan)."""
    if isinstance(submitted, Mapping) and isinstance(rerun, Mapping):
        out = [f"{where}.{k}: missing in one" for k in sorted(set(submitted) ^ set(rerun), key=str)]
        for k in sorted(set(submitted) & set(rerun), key=str):
            out += differences(submitted[k], rerun[k], f"{where}.{k}")
        return out
    if isinstance(submitted, float) or isinstance(rerun, float):
        a, b = float(submitted), float(rerun)
        return [] if a == b or (math.isnan(a) and math.isnan(b)) else [f"{where}: {a!r} submitted, {b!r} rerun"]
    return [] if submitted == rerun else [f"{where}: {submitted!r} submitted, {rerun!r} rerun"]


def verify(file: str | Path, threads: int = 1, log: Callable[[str], None] = print) -> tuple[bool, list[str]]:
    """Rerun a submission's scorer on its policy's shipped set and compare; ``(same, report lines)``. Stops
    with a :class:`SubmissionError` where the submission is not of this benchmark version, set or code."""
    from oar.bench import credit as track
    from oar.bench import response_set, scores_file
    from oar.cpu_kernels import capability
    from oar.method.scorer_registry import scorer_spec
    from oar.models.frozen import policy_dir
    from oar.models.loading import load_model

    data = read_submission(file)
    record, scorer = data["record"], data["scorer"]
    name = scorer["name"]
    if record["version"] != response_set.BENCHMARK_VERSION:
        raise SubmissionError(f"{file}: benchmark version {record['version']}, this checkout is version "
                              f"{response_set.BENCHMARK_VERSION}")
    responses = response_set.load(record["policy"])
    for key, here in (("response_set_sha256", responses.sha256), ("policy_sha256", responses.policy_sha256)):
        if record[key] != here:
            raise SubmissionError(f"{file}: {key} {record[key][:16]}..., the shipped one is {here[:16]}...")
    local = scorer_identity(name)
    if local["code_sha256"] != scorer["code_sha256"]:
        raise SubmissionError(f"{file}: scorer {name!r} here ({local['import_path']}) is not the submitted code "
                              f"(source sha256 {str(local['code_sha256'])[:16]}..., submitted "
                              f"{str(scorer['code_sha256'])[:16]}...)")
    notes = [] if local["file_sha256"] == scorer.get("file_sha256") else [
        f"note: {local['import_path'].split(':')[0]}'s file here is not the submitted one (the function itself is)"]
    model, tokenizer = load_model(policy_dir(record["policy"]), dtype="float32", device="cpu", threads=threads)
    reference = model
    if scorer_spec(name).reads("reference_model") and track.REFERENCE.get(name) == "trained":
        reference, _ = load_model(response_set.trained_policy_dir(record["policy"]), dtype="float32", device="cpu")
    kept: list = []
    rerun = track.run_entry(name, record["policy"], model, tokenizer, responses, seed=int(record["seed"]),
                            reference_model=reference, log=log, on_scores=kept.append)
    digest = scores_file.content_sha256(scores_file.pack(kept[0], responses.rows))
    moved = differences(record["result"], rerun["result"])
    kernels = (record.get("made_with", {}).get("cpu_kernels"), capability().get("capability"))
    lines = [f"scores: {'the same' if digest == data['scores_sha256'] else 'DIFFERENT'} (sha256 {digest[:16]}..., "
             f"submitted {data['scores_sha256'][:16]}...)",
             f"result: {'every number the same' if not moved else f'{len(moved)} numbers differ'}"]
    lines += [f"  {m}" for m in moved[:20]] + notes
    if kernels[0] != kernels[1]:
        lines.append(f"note: the row was made with CPU kernels {kernels[0]}, this machine runs {kernels[1]}: a "
                     "model-reading entry's last bits may differ")
    same = digest == data["scores_sha256"] and not moved
    lines.append(f"verified: {name} on {record['policy']}" if same else f"NOT verified: {name} on {record['policy']}")
    return same, lines
