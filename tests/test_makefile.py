"""`make help` lists every target of the Makefile, one line each."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_lists_every_phony_target():
    phony = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(".PHONY:"):
            phony.update(line.split(":", 1)[1].split())
    assert {"run", "test", "help", "docs"} <= phony
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = {m.group(1): m.group(2) for m in re.finditer(r"^  ([\w-]+) +(\S.*)$", out, flags=re.M)}
    assert phony - set(listed) == set(), f"targets missing from `make help`: {sorted(phony - set(listed))}"
    assert set(listed) - phony == set(), f"`make help` lists unknown targets: {sorted(set(listed) - phony)}"
