"""Where a decision rule was declared: the config file that sets it and the commit that put its present
value there, printed beside the tables that apply it.

A rule (a key of the config, such as ``analysis.primary``) is declared by the last of the run's config
files that sets it (later files override earlier ones). Its declaring commit is the oldest commit of the
unbroken run of the file's mainline (first-parent) history, newest first, in which the key has its
present value: the commit that fixed the rule as it is now applied. Every way this can fail is said,
never papered over: git missing or the file outside a repository (``no git record``), the file's value
not yet committed (``uncommitted``), or a value in effect that no config file holds (``set on the
command line``).

A rule is declared in advance of a run when the run was made at a commit that descends from the rule's
declaring commit, or at a commit whose file already holds the rule's present value (a run made on the branch
that declared it, before the merge that brought the rule into the mainline, whose merge commit is then the
mainline's declaring commit); :func:`runs_text` checks that for every run a table reads, from each run's
``run.yaml``.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

_MISSING = object()


def value_at(config: Mapping[str, Any] | None, key: str) -> Any:
    """The value of the dotted ``key`` in a nested mapping, or a sentinel when it is not set."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (FileNotFoundError, subprocess.TimeoutExpired, OSError):
        return None


def _load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def declaration(key: str, value: Any, files: Sequence[str | Path]) -> dict[str, Any]:
    """Where ``key`` (with the ``value`` in effect) was declared among the run's config ``files``.

    Returns ``key``, ``file`` (the last file setting it, or None), ``status`` (``committed``,
    ``uncommitted``, ``no git record``, ``set on the command line`` or ``not set``), ``commit`` and
    ``date`` (of the declaring commit, where committed) and ``note`` (why, where it is not committed)."""
    out: dict[str, Any] = {"key": key, "file": None, "status": "not set", "commit": None, "date": None, "note": ""}
    if value is None:
        return out
    source = None
    for f in files:
        path = Path(f)
        if path.is_file() and value_at(_load(path.read_text(encoding="utf-8")), key) is not _MISSING:
            source = path
    if source is None:
        out.update(status="set on the command line", note="no config file sets it")
        return out
    out["file"] = str(source)
    if value_at(_load(source.read_text(encoding="utf-8")), key) != value:
        out.update(status="set on the command line", note=f"the value in effect is not {source.name}'s")
        return out
    top = _git(source.parent, "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        out.update(status="no git record", note="git is not available" if top is None else "not in a git repository")
        return out
    root = Path(top.stdout.strip())
    rel = source.resolve().relative_to(root.resolve()).as_posix()
    # The mainline (first-parent) history, a merge read against its first parent: a plain log lists a side
    # branch's commits by date among the mainline's and leaves out the merge that joined them, so a rule
    # completed by a merge would seem to be in no commit.
    log = _git(root, "log", "--first-parent", "--diff-merges=first-parent", "--format=%H%x09%cI", "--name-only",
               "--follow", "--", rel)
    if log is None or log.returncode != 0 or not log.stdout.strip():
        out.update(status="no git record", note=f"{rel} is not committed")
        return out
    history: list[tuple[str, str, str]] = []  # (commit, date, path at that commit), newest first
    for line in log.stdout.splitlines():
        head_line = line.split("\t")
        if len(head_line) == 2 and len(head_line[0]) == 40:
            history.append((head_line[0], head_line[1], rel))
        elif line.strip() and history:
            history[-1] = (*history[-1][:2], line.strip())  # the file's path at that commit (renames)
    declared = None
    for commit, date, path in history:
        shown = _git(root, "show", f"{commit}:{path}")
        if shown is None or shown.returncode != 0 or value_at(_load(shown.stdout), key) != value:
            break
        declared = (commit, date)
    if declared is None:
        out.update(status="uncommitted", note=f"{rel}'s value is in no commit")
        return out
    head = _git(root, "show", f"HEAD:{rel}")
    committed = head is not None and head.returncode == 0 and value_at(_load(head.stdout), key) == value
    if not committed:
        out.update(status="uncommitted", note=f"{rel}'s value differs from its last commit")
        return out
    out.update(status="committed", commit=declared[0], date=declared[1], path=rel, value=value)
    return out


def declarations_text(found: Sequence[Mapping[str, Any]]) -> str:
    """One line per declared rule, for beneath a table."""
    lines = []
    for d in found:
        if d["status"] == "not set":
            continue
        where = f" in `{Path(d['file']).name}`" if d.get("file") else ""
        if d["status"] == "committed":
            lines.append(f"- `{d['key']}`{where}: declared in commit {d['commit'][:12]} ({d['date']})")
        else:
            lines.append(f"- `{d['key']}`{where}: {d['status']} ({d['note']}); no commit declares it")
    if not lines:
        return ""
    return ("\nDecision rules applied here and where they were declared (the commit that gave each its present "
            "value; a rule committed after its runs were made was not declared in advance):\n\n"
            + "\n".join(lines) + "\n")


def run_provenance(run_file: str | Path) -> Mapping[str, Any]:
    """The ``provenance`` record of a training run's ``run.yaml`` (empty where the file or record is missing)."""
    path = Path(run_file)
    data = _load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return (data or {}).get("provenance") or {}


def run_commit(record: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The commit a run was made at and whether its tree had uncommitted changes, from its provenance
    ``record`` (None where its git record is missing)."""
    git = record.get("git") or {}
    commit = git.get("commit")
    return (None if commit in (None, "unknown") else commit), bool(git.get("dirty"))  # "unknown": git was missing


def run_kernels(record: Mapping[str, Any]) -> str | None:
    """How a run's CPU kernels were set, from its provenance ``record``: ``pinned to <level>`` or
    ``unpinned at <torch's capability>`` (None where not recorded). Runs made with other kernels add in
    another order, so their floats follow other paths."""
    kernels = record.get("cpu_kernels") or {}
    if not kernels:
        return None
    level = kernels.get("OAR_CPU_KERNELS")
    return f"pinned to {level}" if level else f"unpinned at {kernels.get('capability') or 'an unrecorded capability'}"


def _descends(root: Path, ancestor: str, commit: str) -> bool | None:
    """Whether ``commit`` is ``ancestor`` or one of its descendants (None: git cannot tell, e.g. the commit
    is not in this repository)."""
    done = _git(root, "merge-base", "--is-ancestor", ancestor, commit)
    if done is None or done.returncode not in (0, 1):
        return None
    return done.returncode == 0


def _made_after(root: Path, found: Mapping[str, Any], commit: str) -> bool | None:
    """Whether a run made at ``commit`` was made with the committed rule ``found`` in force: ``commit``
    descends from the rule's declaring commit, or its own copy of the rule's file holds the rule's present
    value (None: git cannot tell)."""
    descends = _descends(root, found["commit"], commit)
    if descends or "path" not in found:
        return descends
    shown = _git(root, "show", f"{commit}:{found['path']}")
    if shown is None or shown.returncode != 0:
        return descends
    return value_at(_load(shown.stdout), found["key"]) == found["value"]


def _commits_phrase(counts: Counter) -> str:
    return ", ".join(f"{c[:12]} ({n})" for c, n in counts.most_common())


def _counts_phrase(counts: Counter) -> str:
    return ", ".join(f"{c} ({n})" for c, n in counts.most_common())


def runs_text(found: Sequence[Mapping[str, Any]], run_files: Sequence[str | Path]) -> str:
    """Beneath the declarations: the commits the table's runs were made at and their CPU kernels, and for
    each committed rule whether every run was made after it (at a descendant of its declaring commit)."""
    if not run_files:
        return ""
    records = [run_provenance(f) for f in run_files]
    made = [run_commit(r) for r in records]
    commits = Counter(c for c, _ in made if c)
    unrecorded = sum(1 for c, _ in made if not c)
    dirty = sum(1 for c, d in made if c and d)
    lines = [f"\nRuns read: {len(made)}, made at commit{'s' if len(commits) > 1 else ''} "
             f"{_commits_phrase(commits)}" if commits else f"\nRuns read: {len(made)}"]
    if dirty:
        lines[0] += f"; {dirty} of them with uncommitted changes"
    if unrecorded == len(made):
        lines[0] += "; none records the commit it was made at, so no rule can be checked against them"
    elif unrecorded:
        lines[0] += f"; {unrecorded} record no commit (their rules cannot be checked)"
    kernels = Counter(k for k in map(run_kernels, records) if k)
    if len(kernels) == 1:
        lines[0] += f"; CPU kernels {_counts_phrase(kernels)}"
    elif kernels:
        lines[0] += f"; **CPU kernels differ between runs**: {_counts_phrase(kernels)}"
    if kernels and sum(kernels.values()) < len(made):
        lines[0] += f" ({len(made) - sum(kernels.values())} record none)"
    lines[0] += ".\n"
    for d in found:
        if d["status"] != "committed" or not commits:
            continue
        root = Path(d["file"]).parent
        verdicts = {c: _made_after(root, d, c) for c in commits}
        before = {c: n for c, n in commits.items() if verdicts[c] is False}
        unknown = {c: n for c, n in commits.items() if verdicts[c] is None}
        ok = sum(commits.values()) - sum(before.values()) - sum(unknown.values())
        if before:
            n = sum(before.values())
            lines.append(f"- `{d['key']}`: **not declared in advance of {n} of the {len(made)} runs** (made at "
                         f"commits that neither descend from {d['commit'][:12]} nor hold the rule: "
                         f"{_commits_phrase(Counter(before))})")
        elif ok:
            lines.append(f"- `{d['key']}`: declared before {'the' if unknown or unrecorded else 'all'} {ok} runs "
                         f"it can be checked against (each made at a descendant of {d['commit'][:12]} or at a "
                         "commit that holds the rule)")
        if unknown:
            lines.append(f"- `{d['key']}`: cannot be checked for {sum(unknown.values())} runs (git does not know "
                         f"their commits here: {_commits_phrase(Counter(unknown))})")
    return "\n".join(lines) + "\n"


def runs_not_after(found: Mapping[str, Any], run_files: Sequence[str | Path]) -> list[tuple[str, str]]:
    """The runs, among the ``run.yaml`` files that exist, made at a commit that neither descends from the
    declaring commit of the committed rule ``found`` (:func:`declaration`) nor holds the rule (its file with
    the rule's present value): each (run file, commit). Empty
    where the rule is not committed (nothing to check against); a run that records no commit, or one git does
    not know here, is not counted (the table says so)."""
    if found.get("status") != "committed":
        return []
    root = Path(found["file"]).parent
    out = []
    for f in run_files:
        if not Path(f).is_file():
            continue
        commit, _ = run_commit(run_provenance(f))
        if commit and _made_after(root, found, commit) is False:
            out.append((str(f), commit))
    return out
