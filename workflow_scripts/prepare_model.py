r"""Prepare one base model folder from its source (``packaged``, ``tiny``, a folder or a hub id).

Shell::

    python workflow_scripts/prepare_model.py --source packaged --model results/models/smollm2 \
        --summary results/models/smollm2.summary.json

Snakemake (``script:``): outputs ``model`` and ``summary``, params ``source`` and ``seed``. The folder is
written atomically (staging folder, then rename); the summary records the source, parameter count,
checksums and provenance.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import checksum, provenance, run_cli, script_parser  # noqa: E402

from oar.files import atomic_write_json  # noqa: E402


# __doc__ is None under Snakemake's script: (its preamble comes first)
DESCRIPTION = 'Prepare one base model folder from its source (``packaged``, ``tiny``, a folder or a hub id).'


def parse_args(argv):
    p = script_parser(__doc__, DESCRIPTION)
    p.add_argument("--source", required=True, help="'packaged', 'tiny', a model folder or a hub id")
    p.add_argument("--model", required=True, help="model folder to write")
    p.add_argument("--summary", required=True, help="summary JSON to write")
    p.add_argument("--seed", type=int, default=0,
                   help="initialisation (and pretraining) seed of sources 'tiny' and 'chain'")
    p.add_argument("--pretrain", default=None,
                   help="source 'chain': pretraining settings as JSON (models.<name>.pretrain), e.g. '{\"filler\": 1}'")
    p.add_argument("--frozen", default=None,
                   help="source 'chain': install this shipped policy (oar/models/frozen/) instead of pretraining")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    # Snakemake passes the option without a value for sources that need no download
    p.add_argument("--fetched", nargs="*", default=[],
                   help="fetch_model's summary of a hub source (its weights are in the HF cache)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from oar.models.sources import prepare_model

    started = time.perf_counter()
    import json

    # before the pretraining: a CPU that cannot run the pinned kernels stops here, not after it
    record = provenance(vars(args), inputs={"fetched": next(iter(args.fetched), None)}, seed=args.seed)

    if args.pretrain and args.source != "chain":
        raise ValueError(f"--pretrain is for source 'chain', not {args.source!r}")
    if args.frozen and args.source != "chain":
        raise ValueError(f"--frozen is for source 'chain', not {args.source!r}")
    if args.frozen:
        from oar.models.frozen import install

        path = install(args.frozen, args.model)  # every file's hash checked first
    elif args.source == "chain":
        from oar.training.pretrain import write_testbed_model

        key = f"models.{Path(args.model).name}.pretrain"
        path = write_testbed_model(json.loads(args.pretrain or "{}"), args.model, seed=args.seed,
                                   threads=args.threads, key=key)
    else:
        path = prepare_model(args.source, args.model, seed=args.seed)
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    summary = {
        "source": args.source,
        "model": str(path),
        "model_type": cfg.model_type,
        "vocab_size": getattr(cfg, "vocab_size", None),
        "num_hidden_layers": getattr(cfg, "num_hidden_layers", None),
        "hidden_size": getattr(cfg, "hidden_size", None),
        "wall_s": time.perf_counter() - started,
        "frozen": args.frozen,  # the shipped policy this folder is, or None (prepared from its source)
        # source 'chain': settings, loss curve and the measured sampled pass rate of the pretrained model
        "pretrain": json.loads((path / "pretrain.json").read_text()) if (path / "pretrain.json").exists() else None,
        "checksums": checksum(path),
        # on a cluster this job reads hub sources from the cache only (the Snakefile sets these)
        "hub": {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")},
        "provenance": record,
    }
    atomic_write_json(args.summary, summary)
    print(f"model {args.source!r} -> {path}")


if __name__ == "__main__":
    run_cli(main, globals())
