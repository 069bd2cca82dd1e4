"""Write the HTML report (``snakemake --report``) from inside the workflow, for the ``report`` target.

Runs ``snakemake --report <html> tables figures`` on the same Snakefile with the same (resolved) config,
without the lock (the calling workflow holds it); the report collects every table and figure marked
with ``report()`` and their captions (rules/captions/). ``snakemake --report results/report.html``
from the shell gives the same file.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402


def snakemake_command() -> list[str]:
    exe = Path(sys.executable).with_name("snakemake")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "snakemake"]


def main(smk) -> None:
    import yaml

    out = Path(smk.output.html)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".report.", dir=out.parent) as tmp:
        configfile = Path(tmp) / "config.yaml"
        configfile.write_text(yaml.safe_dump(dict(smk.params.config), sort_keys=False))
        html = Path(tmp) / out.name
        cmd = [*snakemake_command(), "--snakefile", str(smk.params.snakefile), "--configfile", str(configfile),
               "--directory", os.getcwd(), "--nolock", "--report", str(html), "tables", "figures"]
        print(" ".join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print(proc.stdout + proc.stderr, flush=True)
        if proc.returncode != 0 or not html.exists():
            raise SystemExit(f"snakemake --report failed (exit {proc.returncode}); see the log above")
        shutil.move(str(html), out)
    print(f"report -> {out}")


if __name__ == "__main__":
    smk = snakemake_only(globals(), "report.py", "from the shell use: snakemake --report results/report.html")
    main(smk)
