"""Small additive helpers for the workflow scripts written for the Snakemake DAG (beside ``_script_io``).

``run_main(main, argv_from_snakemake)`` runs a script's ``main`` either from the shell or under
Snakemake's ``script:`` directive (stdout/stderr to the rule's log), turning user-fixable errors into one
line on stderr and exit status 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # oar importable from the source tree in any environment
    sys.path.insert(1, str(REPO_ROOT))

from _script_io import atomic_open, atomic_write_json, atomic_write_text, redirect_to_log, snakemake_argv  # noqa: E402,F401


def run_main(main: Callable[[list[str] | None], Any], namespace: dict, flags: tuple[str, ...] = (),
             errors: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError)) -> None:
    smk = namespace.get("snakemake")
    try:
        if smk is not None:
            redirect_to_log(smk)
            main(snakemake_argv(smk, flags))
        else:
            main(None)
    except errors as e:
        sys.exit(f"error: {e}")


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: str | Path, rows) -> None:
    with atomic_open(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_model(model_dir: str | Path, device: str = "auto", threads: int | None = None):
    """(model, tokenizer) of a model folder in float32, in eval mode, on ``device`` (auto: CUDA if any)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(int(threads))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    return model, tokenizer

# Scripts run through Snakemake's `script:` directive (prepare_model, heldout, oracle_tokens,
# score_heldout, analyze, tables, plot, report) get Snakemake's preamble above their first line, so
# they must not start with `from __future__ import ...` (a SyntaxError there) and their `__doc__` is None.
