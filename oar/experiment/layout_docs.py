"""The module-by-module layout of oar/ in docs/development.md, generated from the modules' docstrings.

A module says what it holds in the first sentence of its docstring; this lists that sentence for every
module, grouped by package, between two markers in the page, so the hand-written text around the list
stays. ``make docs`` (``python -m oar.experiment.layout_docs``) rewrites the list, and
tests/test_layout_docs.py fails when the committed list differs from the sources or a module has no
docstring. It reads the source files only (``ast``), importing none of them.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "development.md"
BEGIN = ("<!-- The list below is generated from the module docstrings by `make docs` "
         "(python -m oar.experiment.layout_docs): edit a module's docstring, not these lines. -->")
END = "<!-- End of the generated list. -->"

# A sentence ends at '.', '!' or '?' after two characters that are not dots or spaces, then a space: so
# "e.g. " and "i.e. " do not end one.
_SENTENCE_END = re.compile(r"(?<=[^.\s]{2}[.!?])\s")


def summary(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    return _SENTENCE_END.split(paragraph, maxsplit=1)[0]


def docstrings(package: Path) -> dict[Path, str | None]:
    """Every module under ``package`` (its ``__init__.py`` files included), by path relative to the
    package's parent, with its docstring (None where it has none)."""
    return {path.relative_to(package.parent): ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(package.rglob("*.py")) if "__pycache__" not in path.parts}


def undocumented(package: Path) -> list[str]:
    """The modules under ``package`` without a docstring."""
    return [str(path) for path, text in docstrings(package).items() if not (text or "").strip()]


def render(package: Path) -> str:
    """The generated list: per package (folder order), its own docstring's sentence, then one line per
    module with its sentence."""
    found = docstrings(package)
    missing = undocumented(package)
    if missing:
        raise ValueError(f"modules without a docstring (the layout lists each by its first sentence): {missing}")
    lines = [BEGIN]
    for folder in sorted({path.parent for path in found}, key=lambda p: p.parts):
        init = folder / "__init__.py"
        lines += ["", f"**`{folder.as_posix()}/`**" + (f": {summary(found[init])}" if init in found else ""), ""]
        lines += [f"- `{path.name}`: {summary(text)}" for path, text in found.items()
                  if path.parent == folder and path.name != "__init__.py"]
    return "\n".join([*lines, "", END])


def update(page_text: str, generated: str) -> str:
    """``page_text`` with the part between the markers (the markers included) replaced by ``generated``."""
    start, end = page_text.find(BEGIN), page_text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no generated layout between the markers {BEGIN!r} and {END!r}")
    return page_text[:start] + generated + page_text[end + len(END):]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to update (default: %(default)s)")
    parser.add_argument("--package", type=Path, default=ROOT / "oar", help="the package to list")
    args = parser.parse_args(argv)
    text = args.page.read_text(encoding="utf-8")
    args.page.write_text(update(text, render(args.package)), encoding="utf-8")
    print(f"wrote the layout of {args.package.name}/ into {args.page}")


if __name__ == "__main__":
    main()
