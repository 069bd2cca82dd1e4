"""Write one table (CSV + Markdown) from cached analysis files (Snakemake ``script:``). The table is the
``name`` wildcard; it is built as its one declaration says (``oar.experiment.tables`` for the workflow's own
tables, ``oar.studies`` for each study's), from ``oar.analysis``, each in the module of its question."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402

# Under Snakemake this is the job's `snakemake` object; from the shell (--help included) it exits
# here, before the heavy imports below.
smk = snakemake_only(globals(), "tables.py", "the tables are built by oar.analysis") if __name__ == "__main__" else None

from oar.analysis.table_file import write_table  # noqa: E402
from oar.experiment.tables import table  # noqa: E402


def build(smk):
    """(frame, markdown) of the table the job makes, built as its declaration says."""
    return table(smk.wildcards.name).build(smk)


def declared(smk) -> str:
    """Beneath a table that applies declared decision rules: where each was declared (its commit), the
    commits its runs were made at, and whether each rule came before them."""
    if not table(smk.wildcards.name).decided:
        return ""
    from oar.analysis import provenance
    found = [provenance.declaration(k, v, smk.params.configfiles) for k, v in smk.params.decision_rules.items()]
    return provenance.declarations_text(found) + provenance.runs_text(found, smk.params.decided_runs)


if __name__ == "__main__":
    frame, markdown = build(smk)
    markdown += declared(smk)
    write_table(frame, markdown, smk.output.csv, smk.output.md)
    print(markdown)
