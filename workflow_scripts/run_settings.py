"""One training run's resolved settings as its ``settings.yaml`` (Snakemake ``script:`` only; the settings
are the run registry's, ``oar.experiment.runs.Registry.run_settings``), which ``train.py --settings`` reads.

A script, not a ``run:`` block: Snakemake runs a local rule's ``run:`` block in a Snakemake process of its
own, which parses the whole workflow again (about 11 s on 2 cores, once per training run).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402

smk = snakemake_only(globals(), "run_settings.py", "the settings are oar.experiment.runs.Registry.run_settings's")

from oar.experiment.runs import write_settings  # noqa: E402

write_settings(smk.output.settings, smk.params.settings)
