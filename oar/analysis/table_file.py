"""Writing a table: its CSV frame and its Markdown text, each atomically."""

from __future__ import annotations

import os

import pandas as pd

from oar.files import atomic_open, atomic_write_text


def write_table(frame: pd.DataFrame, markdown: str, csv_path: str | os.PathLike, md_path: str | os.PathLike) -> None:
    """Write the CSV (floats to 6 significant digits) and the Markdown, each to a temporary name first
    and then renamed."""
    with atomic_open(csv_path) as f:
        frame.to_csv(f, index=False, float_format="%.6g")
    atomic_write_text(md_path, markdown)
