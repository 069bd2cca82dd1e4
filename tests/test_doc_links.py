"""Every relative link of the user documentation reaches its file, and its `#anchor` a heading there.

Headings get renamed as results change; a link to the old name still renders and silently lands at the
top of the page. Anchors are GitHub's: the heading lower-cased, punctuation other than `-` and `_`
dropped, spaces made `-`.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


@cache  # a page is linked many times
def anchors(path: Path) -> frozenset[str]:
    return frozenset(anchor(line.lstrip("#")) for line in prose_lines(path) if re.match(r"#{1,6} ", line))


def test_anchor_follows_githubs_rule():
    assert anchor("The upper-bound test: two looks, on another draw of the policy") == \
        "the-upper-bound-test-two-looks-on-another-draw-of-the-policy"
    assert anchor("The upper-bound test (`make run-upper-bound`)") == "the-upper-bound-test-make-run-upper-bound"


def test_relative_links_reach_their_file_and_heading():
    broken = []
    for doc in DOCS:
        for line in prose_lines(doc):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto: ...
                    continue
                name, _, fragment = target.partition("#")
                path = (doc.parent / name).resolve() if name else doc
                if not path.exists():
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
                elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
