"""Download a hub model into the Hugging Face cache (HF_HOME), where the network is.

Shell::

    python workflow_scripts/fetch_model.py --source Qwen/Qwen2.5-Math-1.5B --summary results/models/m.fetched.json

The workflow runs it as a local rule (on the machine Snakemake runs on: a cluster's login node), so
that prepare_model, a cluster job, reads the weights from the cache with the hub offline. Only the
files ``from_pretrained`` reads are fetched (no duplicate .bin/.pth weights). The summary records the
hub revision the cache holds and where.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import provenance, run_cli, script_parser  # noqa: E402

from oar.files import atomic_write_json  # noqa: E402

# weights in other formats beside the safetensors files transformers loads
SKIP = ["*.bin", "*.pth", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.gguf", "original/*"]


def parse_args(argv):
    p = script_parser(__doc__, "Download a hub model into the Hugging Face cache (HF_HOME), where the network is.")
    p.add_argument("--source", required=True, help="hub id, e.g. Qwen/Qwen2.5-7B")
    p.add_argument("--summary", required=True, help="summary JSON to write")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from huggingface_hub import snapshot_download

    started = time.perf_counter()
    path = Path(snapshot_download(args.source, ignore_patterns=SKIP))
    files = sorted(str(f.relative_to(path)) for f in path.rglob("*") if f.is_file())
    atomic_write_json(args.summary, {
        "source": args.source,
        "revision": path.name,  # the snapshot folder is named by the hub commit
        "snapshot": str(path),
        "hf_home": os.environ.get("HF_HOME"),
        "files": files,
        "bytes": sum((path / f).stat().st_size for f in files),
        "wall_s": time.perf_counter() - started,
        "provenance": provenance(vars(args)),
    })
    print(f"{args.source} @ {path.name}: {len(files)} files in {path}")


if __name__ == "__main__":
    run_cli(main, globals())
