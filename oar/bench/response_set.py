"""Each frozen policy's fixed response set: what every scorer of the ground-truth track ranks.

A response set is the policy's responses to the first ``problems`` held-out problems of its chain task
(the test split, which neither pretraining nor RL draws from), ``group`` = 8 each, sampled once at the
training temperature with the training's token budget: the groups GRPO learns from, so that a scorer that
reads a group (KTAE) sees what it would see in training. Its spec (:data:`SPECS`) mirrors the config that
trains the policy; a test ties the two together.

The set is shipped (``oar/bench/data/<policy>.jsonl.gz``, one JSON line per response) with the sha256 of
its uncompressed lines in ``response_sets.json``, beside the sha256 of the policy weights it was sampled
from. :func:`load` checks both before anything is scored, and :func:`sample` regenerates a set from the
policy (``python -m oar.bench responses``), which gives the same bytes on the kind of machine that made
it: sampling on CPU is reproducible there, not on other CPUs, hence the shipped file.

Each line holds the token ids (never re-tokenised), the grade, and what the chain task's grammar parses
from the reasoning (``oar.data.chains``): the decisive positions (every step's relation and result), the
last step's, the positions that cannot change the answer, and per step its decisive positions, its
relation with the relation token's position and whether the step is right.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

# Raised whenever a response set, its spec, a metric's definition or what a scorer is given changes (2: a
# scorer sees only what it declares, the models are digested around each entry).
BENCHMARK_VERSION = 2
# The response sets of this version, by policy: the sha256 of each set's uncompressed lines and of the policy
# weights it was sampled from. The index (response_sets.json) must say the same: an index edited, or a set
# shipped anew, is another benchmark version, which this code does not claim to be until both are raised here.
SHIPPED: dict[str, dict[str, str]] = {
    "chain_f1": {"sha256": "7b99f016690b798f59791010ef3ef68108aa7453e5159259b9a5a053ba3ae506",
                 "policy_sha256": "6bd2dd91c5d70530dde0fa4409027a3f9fd8c422892510d8cc5c406d1cfdb14c"},
    "chain_d8": {"sha256": "658dd94a7de997428798042207af479d01bb403657431de23bbd2c93371d1c6c",
                 "policy_sha256": "cbcb8c965e607e74effa53f43ecb07ff7dcf57f8c83a647e057f9661ba552708"},
}
DATA_DIR = Path(__file__).resolve().parent / "data"
INDEX = DATA_DIR / "response_sets.json"


class ResponseSetError(ValueError):
    """A response set is unknown, or its file is not the one its index hashes; the message names it."""


@dataclass(frozen=True)
class ResponseSetSpec:
    """How a policy's response set is sampled, and the probe settings its scorers read it with (those of
    the training that starts from the policy: ``config``'s ``training.oar`` and ``grading``)."""

    policy: str
    dataset: str  # the chain task's held-out benchmark (oar.data.catalogue)
    config: str  # the config whose training this mirrors
    problems: int = 200
    group: int = 8  # responses per problem: trainer.num_generations
    temperature: float = 1.0  # trainer.temperature
    max_new_tokens: int = 96  # trainer.max_completion_length
    seed: int = 0
    batch_prompts: int = 16  # prompts per generate call (x group sequences): a training step's batch
    own_conclusion: bool = True
    substitute: str = "."
    answer_statement: bool = True
    fallback_last_number: bool = True


SPECS: dict[str, ResponseSetSpec] = {
    "chain_f1": ResponseSetSpec("chain_f1", "chain_test", "config/config.yaml", max_new_tokens=96),
    "chain_d8": ResponseSetSpec("chain_d8", "chain5_test", "config/studies/decisive.yaml", max_new_tokens=256),
}


def spec_of(policy: str) -> ResponseSetSpec:
    if policy not in SPECS:
        raise ResponseSetError(f"no response set is specified for policy {policy!r}; specified: {sorted(SPECS)}")
    return SPECS[policy]


# ------------------------------------------------------------------------------------ the file


def encode_lines(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The canonical bytes of a set: one JSON object per line, keys sorted, no spaces."""
    return "".join(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n" for row in rows).encode("utf-8")


def content_sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def write(rows: Sequence[Mapping[str, Any]], path: str | Path) -> str:
    """Write ``rows`` gzipped (no name, time 0: the same rows give the same file) and return the sha256 of
    the uncompressed lines, which is what the index records."""
    from oar.files import atomic_open

    content = encode_lines(rows)
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        f.write(content)
    with atomic_open(path, "wb", encoding=None) as f:
        f.write(buffer.getvalue())
    return content_sha256(content)


def index() -> dict[str, Any]:
    """The shipped response sets by policy (``response_sets.json``); empty when none is shipped."""
    if not INDEX.is_file():
        return {}
    return json.loads(INDEX.read_text(encoding="utf-8"))["sets"]


def check_index_version(policy: str) -> None:
    """Stop, naming the index, where it disagrees with this code's version: its ``version``, or ``policy``'s
    hashes against :data:`SHIPPED`. An index that says other hashes is another benchmark, whose rows must
    not be filed under this version."""
    where = INDEX.relative_to(DATA_DIR.parents[2]) if INDEX.is_relative_to(DATA_DIR.parents[2]) else INDEX
    raw = json.loads(INDEX.read_text(encoding="utf-8"))
    fix = (f"a new benchmark version, not version {BENCHMARK_VERSION}: raise BENCHMARK_VERSION and set SHIPPED in "
           "oar/bench/response_set.py (and docs/benchmark.md's Versions), then score every row again")
    if raw.get("version") != BENCHMARK_VERSION:
        raise ResponseSetError(f"{where}: version {raw.get('version')!r}, the code is benchmark version "
                               f"{BENCHMARK_VERSION}: {fix}")
    entry, shipped = raw["sets"][policy], SHIPPED.get(policy)
    if shipped is None:
        raise ResponseSetError(f"{where}: a response set for {policy!r}, which benchmark version {BENCHMARK_VERSION} "
                               f"does not ship: {fix}")
    for key, what in (("sha256", "the set's lines"), ("policy_sha256", "the policy weights")):
        if entry.get(key) != shipped[key]:
            raise ResponseSetError(f"{where}: {policy}'s {key} (of {what}) is {str(entry.get(key))[:16]}..., "
                                   f"benchmark version {BENCHMARK_VERSION} ships {shipped[key][:16]}...: an edited "
                                   f"index is {fix}")


@dataclass
class ResponseSet:
    """A loaded, verified response set: its rows in file order (problem by problem, ``group`` each)."""

    policy: str
    spec: ResponseSetSpec
    rows: list[dict[str, Any]]
    sha256: str
    policy_sha256: str

    @property
    def groups(self) -> list[int]:
        """Each row's group (its problem)."""
        return [int(r["problem"]) for r in self.rows]

    def subset(self, problems: int) -> ResponseSet:
        """The rows of the first ``problems`` problems (quick checks; never a leaderboard row)."""
        keep = set(sorted(set(self.groups))[:problems])
        return replace(self, rows=[r for r in self.rows if int(r["problem"]) in keep])

    def probes(self, tokenizer) -> list:
        """Every row's probe as training builds it (the spec's probe settings), with the parsed positions
        attached; stops where the probe's reasoning is not the one the file records (a tokenizer or probe
        code other than the set's: a new benchmark version)."""
        from oar.method.probes import ProbeOptions

        probes = ProbeOptions.of(self.spec).build(tokenizer, [r["prompt_ids"] for r in self.rows],
                                                  [r["response_ids"] for r in self.rows])
        out = []
        for row, probe in zip(self.rows, probes):
            if probe.reasoning_len != row["reasoning_len"]:
                raise ResponseSetError(
                    f"response set {self.policy}, problem {row['problem']} sample {row['sample']}: the probe's "
                    f"reasoning has {probe.reasoning_len} tokens, the file records {row['reasoning_len']} (the probe "
                    f"code changed since benchmark version {BENCHMARK_VERSION}'s set was made)")
            out.append(replace(probe, decisive=tuple(row["decisive"]), final_step=tuple(row["final_step"]),
                               irrelevant=tuple(row["irrelevant"])))
        return out


def read_verified(file: str | Path, sha256: str) -> list[dict[str, Any]]:
    """The rows of a gzipped set whose uncompressed lines must hash to ``sha256``; stops naming the file."""
    file = Path(file)
    if not file.is_file():
        raise ResponseSetError(f"{file}: missing")
    try:
        content = gzip.decompress(file.read_bytes())
    except (OSError, EOFError) as error:
        raise ResponseSetError(f"{file}: not a gzip file ({error})") from None
    found = content_sha256(content)
    if found != sha256:
        raise ResponseSetError(f"{file}: sha256 {found[:16]}... of its lines, the index says {sha256[:16]}...: not "
                               "the shipped response set")
    return [json.loads(line) for line in content.decode("utf-8").splitlines()]


def load(policy: str) -> ResponseSet:
    """The shipped response set of ``policy``, after checking the index against this version's hashes
    (:func:`check_index_version`), the sha256 of its lines against the index and the index's policy hash
    against the shipped policy's weights."""
    from oar.models.frozen import index as frozen_index

    sets = index()
    if policy not in sets:
        raise ResponseSetError(f"no shipped response set for policy {policy!r}; shipped: {sorted(sets)}")
    check_index_version(policy)
    entry = sets[policy]
    rows = read_verified(DATA_DIR / entry["file"], entry["sha256"])
    shipped = frozen_index().get(policy, {}).get("files", {}).get("model.safetensors")
    if shipped != entry["policy_sha256"]:
        raise ResponseSetError(f"response set {policy}: sampled from weights {entry['policy_sha256'][:16]}..., the "
                               f"shipped policy {policy} is {str(shipped)[:16]}...: resample it "
                               "(python -m oar.bench responses) under a new benchmark version")
    return ResponseSet(policy, spec_of(policy), rows, entry["sha256"], entry["policy_sha256"])


# ------------------------------------------------------------------------------------ sampling


def parsed_row(tokenizer, probe) -> dict[str, Any]:
    """What the chain task's grammar parses from a probe's reasoning: decisive, last-step and irrelevant
    positions, and per step its decisive positions, relation, relation position and whether it is right."""
    from oar.analysis.chain_truth import step_tokens
    from oar.data.chains import step_errors
    from oar.method.probes import token_char_spans
    from oar.training.grpo_trainer import with_decisive_tokens

    parsed = with_decisive_tokens(tokenizer, probe)
    ids = probe.response_ids[: probe.reasoning_len]
    text, starts, ends = token_char_spans(tokenizer, ids)
    tokens = [text[a:b] for a, b in zip(starts, ends)]
    steps, relations = step_tokens(tokens)
    errors = step_errors(text)
    return {"reasoning_len": probe.reasoning_len, "decisive": list(parsed.decisive),
            "final_step": list(parsed.final_step), "irrelevant": list(parsed.irrelevant),
            "steps": [{"positions": positions, "relation": relation, "relation_at": at, "right": error is None}
                      for positions, (relation, at), error in zip(steps, relations, errors)]}


def sample(spec: ResponseSetSpec, model_dir: str | Path, threads: int = 1, log=print) -> list[dict[str, Any]]:
    """The response set of ``spec`` sampled from the policy in ``model_dir``: per batch of
    ``batch_prompts`` problems, ``group`` copies of each prompt left-padded into one ``generate`` call
    seeded by the batch's index; every response cut at its first end-of-sequence token."""
    import torch

    from oar.data.catalogue import DATASETS, chain_rows
    from oar.evaluation.generation import eos_token_ids
    from oar.grading.grader import grade
    from oar.method.probes import ProbeOptions
    from oar.models.loading import load_model
    from oar.prompting import build_prompt, encode_prompts
    from oar.sdpa_kernels import without_cudnn_attention

    problems = chain_rows(DATASETS[spec.dataset].generated)[: spec.problems]
    model, tokenizer = load_model(model_dir, dtype="float32", device="cpu", threads=threads)
    prompt_ids = encode_prompts(tokenizer, [build_prompt(p.text, tokenizer) for p in problems])
    eos, pad = eos_token_ids(model, tokenizer), tokenizer.pad_token_id
    jobs = [(i, j) for i in range(len(problems)) for j in range(spec.group)]
    per_call = spec.batch_prompts * spec.group
    responses: dict[tuple[int, int], tuple[list[int], bool]] = {}
    for call, start in enumerate(range(0, len(jobs), per_call)):
        batch = jobs[start : start + per_call]
        width = max(len(prompt_ids[i]) for i, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (i, _) in enumerate(batch):
            ids[row, width - len(prompt_ids[i]) :] = torch.tensor(prompt_ids[i])
            mask[row, width - len(prompt_ids[i]) :] = 1
        torch.manual_seed(spec.seed * 1_000_003 + call)
        with torch.no_grad(), without_cudnn_attention():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=spec.max_new_tokens,
                                 do_sample=True, temperature=spec.temperature, top_p=1.0, top_k=0,
                                 pad_token_id=pad, eos_token_id=eos, repetition_penalty=1.0)[:, width:].tolist()
        for (i, j), seq in zip(batch, out):
            stop = next((k for k, t in enumerate(seq) if t in set(eos)), None)
            responses[i, j] = (seq if stop is None else seq[:stop], stop is not None)
        log(f"sampled {len(responses)}/{len(jobs)} responses")
    probes = ProbeOptions.of(spec).build(tokenizer, [prompt_ids[i] for i, _ in jobs],
                                         [responses[job][0] for job in jobs])
    rows = []
    for (i, j), probe in zip(jobs, probes):
        text = tokenizer.decode(probe.response_ids, skip_special_tokens=True)
        graded = grade(text, str(problems[i].answer), fallback_last_number=spec.fallback_last_number,
                       answer_statement=spec.answer_statement)
        rows.append({"problem": i, "sample": j, "reference": str(problems[i].answer), "prompt_ids": list(prompt_ids[i]),
                     "response_ids": list(probe.response_ids), "finished": responses[i, j][1], "text": text,
                     "correct": bool(graded.correct), **parsed_row(tokenizer, probe)})
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts a set's index entry records: responses, correct ones, mixed groups, parsed responses."""
    by_problem: dict[int, list[bool]] = {}
    for r in rows:
        by_problem.setdefault(int(r["problem"]), []).append(bool(r["correct"]))
    return {"responses": len(rows), "problems": len(by_problem), "correct": sum(bool(r["correct"]) for r in rows),
            "mixed_groups": sum(0 < sum(c) < len(c) for c in by_problem.values()),
            "with_decisive_tokens": sum(bool(r["decisive"]) for r in rows)}


def spec_record(spec: ResponseSetSpec) -> dict[str, Any]:
    return asdict(spec)


# ------------------------------------------------------------------------------------ the trained policy


def trained_policy_dir(policy: str) -> Path:
    """The shipped policy trained from ``policy`` by GRPO (PRIME's implicit reward model in the benchmark),
    after checking every file's sha256 against the index."""
    from oar.files import sha256_file

    entry = index().get(policy, {}).get("trained_policy")
    if not entry:
        raise ResponseSetError(f"no trained policy is shipped for {policy!r} (the reference model of the prime entry)")
    where = DATA_DIR / entry["dir"]
    for file, expected in sorted(entry["files"].items()):
        path = where / file
        if not path.is_file():
            raise ResponseSetError(f"{path}: missing (the GRPO-trained {policy})")
        if sha256_file(path) != expected:
            raise ResponseSetError(f"{path}: sha256 {sha256_file(path)[:16]}..., the index says {expected[:16]}...: "
                                   f"not the shipped GRPO-trained {policy}")
    return where


# ------------------------------------------------------------------------------------ shipping (maintainers)


def _write_index(policy: str, entry: dict[str, Any]) -> None:
    from oar.files import atomic_write_json

    sets = index()
    sets[policy] = entry
    atomic_write_json(INDEX, {"about": "the token-credit benchmark's response sets (oar.bench.response_set): per "
                                       "policy the sha256 of the set's uncompressed lines and of the weights it "
                                       "was sampled from", "version": BENCHMARK_VERSION,
                              "sets": dict(sorted(sets.items()))})


def ship(policy: str, rows: Sequence[Mapping[str, Any]], threads: int) -> Path:
    """Write a freshly sampled set of ``policy`` into the package with its index entry. A set of other
    bytes is another benchmark version: :func:`load` refuses it until ``BENCHMARK_VERSION`` and
    :data:`SHIPPED` are raised to say so."""
    import torch

    from oar.bench.leaderboard import commit
    from oar.cpu_kernels import capability
    from oar.models.frozen import weights_sha256

    spec = spec_of(policy)
    path = DATA_DIR / f"{policy}.jsonl.gz"
    digest = write(rows, path)
    kernels = capability()
    old = index().get(policy, {})
    _write_index(policy, {**old, "file": path.name, "sha256": digest, "policy_sha256": weights_sha256(policy),
                          "spec": spec_record(spec), **summary(rows),
                          "made_with": {**commit(), "cpu_kernels": kernels.get("capability"),
                                        "mkl_branch": kernels.get("mkl_branch"), "threads": threads,
                                        "torch": torch.__version__}})
    return path


def ship_trained(policy: str, model_dir: str | Path, made_from: str) -> Path:
    """Copy the policy GRPO trained from ``policy`` (a model folder) into the package as PRIME's implicit
    reward model, with every file's sha256 and ``made_from`` (the run it is) in the index."""
    import shutil

    from oar.files import sha256_file
    from oar.models.ship import MODEL_FILES

    model_dir = Path(model_dir)
    files = [f for f in MODEL_FILES if f != "pretrain.json" and (model_dir / f).is_file()]
    if "model.safetensors" not in files:
        raise ResponseSetError(f"{model_dir}: no model.safetensors")
    where = DATA_DIR / f"{policy}.grpo"
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    for f in files:
        shutil.copyfile(model_dir / f, where / f)
    entry = index().get(policy)
    if entry is None:
        raise ResponseSetError(f"ship the response set of {policy} first")
    trained = {"dir": where.name, "made_from": made_from, "files": {f: sha256_file(where / f) for f in files}}
    _write_index(policy, {**entry, "trained_policy": trained})
    write_trained_card(policy)
    return where


def trained_card_text(policy: str, trained: dict[str, Any]) -> str:
    """The card of the GRPO-trained ``policy`` shipped for PRIME: what it is, how it was made, its files'
    sizes and sha256 (from the index, so card and check cannot disagree), its licence."""
    from oar.models.ship import LICENCE

    where = DATA_DIR / trained["dir"]
    sizes = {f: (where / f).stat().st_size for f in trained["files"]}
    rows = "\n".join(f"| `{f}` | {sizes[f]:,} | `{h}` |" for f, h in sorted(trained["files"].items()))
    return (
        f"# GRPO-trained `{policy}` (PRIME's reward model)\n\n"
        "## What it is\n\n"
        f"The frozen policy `{policy}` (`oar/models/frozen/{policy}`) after a GRPO run of the testbed. "
        "The token-credit "
        "benchmark's `prime` entry scores a token by `beta log(pi_phi(y_t) / pi_ref(y_t))` with pi_phi this policy "
        f"and pi_ref the frozen `{policy}`; nothing else uses it. The workflow and the benchmark's learning track "
        f"start RL from the frozen `{policy}`, not from this one.\n\n"
        f"## How it was made\n\n{trained['made_from']}.\n\n"
        "## Files\n\n| file | bytes | sha256 |\n| --- | ---: | --- |\n" + rows + "\n\n"
        f"Size in all: {sum(sizes.values()):,} bytes. The sha256 are those of `response_sets.json`; the benchmark "
        "checks every file against them before it loads the policy and stops, naming the file, when one differs.\n\n"
        f"## Licence\n\n{LICENCE}.\n")


def write_trained_card(policy: str) -> Path:
    """Write ``CARD.md`` beside the shipped GRPO-trained ``policy`` from its index entry."""
    from oar.files import atomic_write_text

    trained = index()[policy]["trained_policy"]
    path = DATA_DIR / trained["dir"] / "CARD.md"
    atomic_write_text(path, trained_card_text(policy, trained))
    return path
