"""Small helpers shared by the model-reading workflow scripts (beside ``_script_io``): JSONL files,
loading a model folder, and the options every held-out script takes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # oar importable from the source tree in any environment
    sys.path.insert(1, str(REPO_ROOT))

from _script_io import (  # noqa: E402,F401
    atomic_open, atomic_write_json, atomic_write_text, run_cli, script_parser, snakemake_only,
)


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: str | Path, rows) -> None:
    with atomic_open(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def model_script_parser(description: str | None, fallback: str) -> argparse.ArgumentParser:
    """A parser with the options every held-out script takes: the model folder, the answer-span
    fallback switch and the torch thread count."""
    p = script_parser(description, fallback)
    p.add_argument("--model", required=True, help="model folder (from prepare_model.py or python -m oar.models.sources)")
    p.add_argument("--no-answer-statement", action="store_true",
                   help="a response without \\boxed{} does not answer by its last 'The answer is ...' statement")
    p.add_argument("--no-fallback-last-number", action="store_true",
                   help="a response without \\boxed{} or statement has no answer (by default its last number is the answer)")
    p.add_argument("--appended-conclusion", action="store_true",
                   help="probes append the conclusion template after the reasoning even when the response states "
                        "its own (the authors' probe; by default the probe continues the response's own words)")
    p.add_argument("--substitute", default="pad",
                   help="what OAR-P and the oracle substitute for a reasoning token: 'pad' or a one-token text")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own choice)")
    return p


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
