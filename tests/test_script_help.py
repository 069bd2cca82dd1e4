"""Every workflow script answers --help at once (before torch, transformers or TRL are imported) with
its whole description and every option's default."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "workflow_scripts").glob("*.py") if not p.name.startswith("_"))
HEAVY = ("torch", "transformers", "trl", "accelerate", "datasets", "pandas", "matplotlib")

# Runs one script's --help in a fresh interpreter and reports its output, exit code and which heavy
# modules it had imported by then.
PROBE = """
import contextlib, io, json, runpy, sys
sys.argv = [{path!r}, "--help"]
out, code = io.StringIO(), None
with contextlib.redirect_stdout(out):
    try:
        runpy.run_path({path!r}, run_name="__main__")
    except SystemExit as e:
        code = e.code
print(json.dumps({{"out": out.getvalue(), "code": code,
                  "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def help_of(script: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(path=str(script), heavy=HEAVY)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_script_is_covered():
    assert {p.stem for p in SCRIPTS} >= {"train", "evaluate", "prepare_data", "prepare_model", "heldout",
                                         "oracle_tokens", "score_heldout", "analyze", "tables", "plot", "report"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_is_complete_and_imports_nothing_heavy(script):
    result = help_of(script)
    assert result["code"] in (0, None), result
    assert result["heavy"] == [], f"{script.name} --help imported {result['heavy']}"
    text = result["out"]
    assert text.startswith("usage:")
    doc = script.read_text().split('"""')[1]
    last_paragraph = " ".join(doc.strip().split("\n\n")[-1].split())
    assert last_paragraph in " ".join(text.split()), "the description is cut"
    # every option with a real default names it
    if "options:" in text:
        for match in re.finditer(r"add_argument\(\s*\"(--[\w-]+)\"[^)]*?default=([^,)\s]+)", script.read_text()):
            option, default = match.groups()
            if default in ("None", "False", "[]"):
                continue
            options = text.split("\noptions:", 1)[1]
            block = options.split(f"\n  {option}", 1)[1].split("\n  -", 1)[0]
            assert "(default:" in block, f"{script.name} {option} hides its default"


def test_oracle_script_lists_the_oracle_interventions():
    from oar.analysis.oracle import INTERVENTIONS

    text = help_of(ROOT / "workflow_scripts" / "oracle_tokens.py")["out"]
    assert "{" + ",".join(INTERVENTIONS) + "}" in text.replace("\n", "").replace(" ", "")
    assert "(default: space)" in " ".join(text.split())
