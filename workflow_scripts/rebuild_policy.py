r"""Pretrain a shipped policy's recipe again and say whether this machine gives the shipped bits.

Snakemake (``script:``, rule ``rebuild_policy``): output ``model`` (the rebuilt folder) and ``report`` (JSON:
the policy, both weights' sha256, whether they match, and the kernels this job ran); params ``policy``,
``seed``, ``pretrain`` and ``threads``. The runs keep starting from the shipped file either way: bits match
only where the same kernels run (an Intel CPU with AVX2 or better for ``cpu_kernels: avx2``).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import provenance, snakemake_only  # noqa: E402

smk = snakemake_only(globals(), "rebuild_policy.py", "run `make rebuild-policies`")

from oar.files import atomic_write_json  # noqa: E402
from oar.models.frozen import WEIGHTS, sha256_file, weights_sha256  # noqa: E402
from oar.training.pretrain import write_testbed_model  # noqa: E402

record = provenance({"policy": smk.params.policy, "seed": smk.params.seed}, inputs={}, seed=smk.params.seed)
model = Path(smk.output.model)
key = f"models.{model.name}.pretrain"
write_testbed_model(json.loads(smk.params.pretrain), model, seed=smk.params.seed, threads=smk.params.threads, key=key)
rebuilt, shipped = sha256_file(model / WEIGHTS), weights_sha256(smk.params.policy)
report = {"policy": smk.params.policy, "shipped_sha256": shipped, "rebuilt_sha256": rebuilt,
          "match": rebuilt == shipped,
          "cpu_kernels": record["cpu_kernels"], "provenance": record}
atomic_write_json(smk.output.report, report)
print(f"{smk.params.policy}: rebuilt {'matches' if report['match'] else 'DIFFERS FROM'} the shipped weights "
      f"({rebuilt[:16]}... against {shipped[:16]}...; kernels {record['cpu_kernels'].get('capability')}, MKL "
      f"{record['cpu_kernels'].get('mkl_branch')})")
