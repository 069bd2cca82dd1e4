"""Where a decision rule was declared: the config file that sets it and the commit that put its present
value there, printed beside the tables that apply it.

A rule (a key of the config, such as ``analysis.primary``) is declared by the last of the run's config
files that sets it (later files override earlier ones). Its declaring commit is the oldest commit of the
unbroken run of the file's history, newest first, in which the key has its present value: the commit that
fixed the rule as it is now applied. Every way this can fail is said, never papered over: git missing or
the file outside a repository (``no git record``), the file's value not yet committed (``uncommitted``),
or a value in effect that no config file holds (``set on the command line``).
"""

from __future__ import annotations

import subprocess
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
    log = _git(root, "log", "--format=%H%x09%cI", "--name-only", "--follow", "--", rel)
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
    out.update(status="committed", commit=declared[0], date=declared[1])
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
