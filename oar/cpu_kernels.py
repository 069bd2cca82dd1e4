"""Pin the instruction set of the CPU kernels, so that CPU training gives the same floats on other CPUs.

torch, MKL and oneDNN each pick their kernels by what the CPU offers (AVX-512 here, AVX2 there), and
vectors of another width add in another order: a GRPO run on a laptop drifts from the published one
from its first update. Three switches fix the choice, each read once, when its library first runs:

- ``ATEN_CPU_CAPABILITY`` (torch's own kernels: element-wise ops, reductions, softmax, attention): torch
  takes ``avx2``, ``avx512`` or ``default`` without checking the CPU (an unsupported level crashes with
  an illegal instruction) and ignores any other value with a warning;
- ``MKL_CBWR`` (MKL's conditional numerical reproducibility: matrix products, and the square roots in
  AdamW): ``AVX2,STRICT`` runs MKL's AVX2 code path on any Intel CPU that has AVX2, and STRICT also makes
  the result independent of the arrays' memory alignment, for a fixed number of threads. On other
  vendors' CPUs (AMD) MKL silently keeps its own branch (AUTO) for ``AVX2`` and ``AVX512``; only
  ``COMPATIBLE`` is taken there;
- ``ONEDNN_MAX_CPU_ISA`` (oneDNN: a cap on the ISA its JIT kernels use).

`apply` sets them from ``OAR_CPU_KERNELS`` (``avx2``, ``avx512`` or ``default``; the workflow exports it
from the config key ``cpu_kernels``) before torch runs anything; ``import oar`` calls it. A level the CPU
does not offer, or an unknown one, stops with an error naming it. `capability` is what torch and MKL
report afterwards (MKL's branch read back through its own query, so a branch MKL did not take stops the
job too); provenance records it with the pins. The number of threads is the other input to the order
of sums; the workflow fixes it per job (``resources.<kind>.threads``).

This module imports nothing heavy: it must run before torch.
"""

from __future__ import annotations

import os
import platform
import sys

VARIABLE = "OAR_CPU_KERNELS"
# how to run without a pin, said in every error
UNPIN = "or run without a pin (snakemake --config cpu_kernels=none; the numbers then agree within seed noise)"
# level -> (CPU flags it needs in /proc/cpuinfo, the three libraries' settings)
LEVELS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "default": ((), {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE,STRICT", "ONEDNN_MAX_CPU_ISA": "SSE41"}),
    "avx2": (("avx2", "fma"),
             {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
    "avx512": (("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"),
               {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}),
}
# what torch.backends.cpu.get_cpu_capability() reports at each level
CAPABILITY = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}
# MKL's code branches by the number its query returns (oneMKL's named constants MKL_CBWR_*); 1: CNR off
# (others are reported as "code N")
MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}


class CpuKernelsError(RuntimeError):
    """A pin that cannot be honoured; the message names the level and what is missing."""


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` of /proc/cpuinfo ("" where the file has none); None where there is no such file
    (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return ""


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo; None where there is none (not Linux)."""
    flags = _cpuinfo("flags")
    return None if flags is None else set(flags.split())


def cpu_vendor() -> str | None:
    """The CPU's vendor from /proc/cpuinfo (``GenuineIntel``, ``AuthenticAMD``); None where it is not said."""
    return _cpuinfo("vendor_id") or None


def unhonoured(level: str, flags: set[str] | None = None, vendor: str | None = None) -> str | None:
    """Why this CPU cannot run ``level`` as pinned, before anything runs (None: it can): an instruction it
    lacks, another architecture, or, for the vector levels, a CPU that is not Intel's, on which MKL keeps
    its own branch (what `capability` would find after the first matrix product)."""
    try:
        environment(level, flags)
    except CpuKernelsError as error:
        return str(error)
    vendor = cpu_vendor() if vendor is None else vendor
    if level in ("avx2", "avx512") and vendor != "GenuineIntel":
        return (f"{VARIABLE}={level}: this CPU is {vendor or 'of an unknown vendor'}, and MKL takes its "
                f"{level.upper()} branch only on Intel CPUs")
    return None


def environment(level: str, flags: set[str] | None = None) -> dict[str, str]:
    """The libraries' settings for ``level``; raises CpuKernelsError when the level is unknown or this
    CPU (``flags``, default /proc/cpuinfo) lacks an instruction it needs."""
    if level not in LEVELS:
        raise CpuKernelsError(f"{VARIABLE} (config key cpu_kernels): unknown level {level!r}; "
                              f"known: {', '.join(LEVELS)}")
    needs, settings = LEVELS[level]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise CpuKernelsError(f"{VARIABLE}={level}: the levels are x86-64 instruction sets and this CPU is "
                              f"{platform.machine()!r}: {UNPIN}")
    flags = cpu_flags() if flags is None else flags
    if needs and flags is None:
        raise CpuKernelsError(f"{VARIABLE}={level}: cannot read this CPU's flags (no /proc/cpuinfo) to check "
                              f"that it has {', '.join(needs)}; {UNPIN}")
    missing = [flag for flag in needs if flag not in flags]
    if missing:
        raise CpuKernelsError(f"{VARIABLE}={level}: this CPU does not offer {', '.join(missing)}; "
                              f"pin a lower level ({', '.join(lv for lv in LEVELS if lv != level)}) {UNPIN}")
    return dict(settings)


def apply(environ=os.environ) -> str | None:
    """Set the libraries' variables from ``OAR_CPU_KERNELS`` (nothing when it is unset or empty) and
    return the level. Raises CpuKernelsError for a level this CPU cannot honour, for torch that already
    ran a kernel at another level, and for a library variable already set otherwise."""
    level = environ.get(VARIABLE, "").strip()
    if not level:
        return None
    settings = environment(level)
    clashes = [f"{k}={environ[k]}" for k, v in settings.items() if environ.get(k, v) != v]
    if clashes:
        raise CpuKernelsError(f"{VARIABLE}={level} sets {', '.join(f'{k}={v}' for k, v in settings.items())}, "
                              f"but the environment has {', '.join(clashes)}")
    environ.update(settings)
    if "torch" in sys.modules and environ is os.environ:
        # torch (and MKL, oneDNN) read their variable on first use, not on import: a process that imported
        # torch but ran nothing yet is pinned all the same; one that already ran a kernel is not
        import torch

        if torch.backends.cpu.get_cpu_capability() != CAPABILITY[level]:
            raise CpuKernelsError(f"{VARIABLE}={level}: torch already runs at "
                                  f"{torch.backends.cpu.get_cpu_capability()}; import oar before running torch")
    return level


def mkl_branch() -> str | None:
    """The code branch MKL runs (its CNR query, asked of the MKL that torch carries): ``AVX2`` where the
    pin took, ``AUTO`` where MKL kept its own choice, ``OFF`` unpinned; None where torch has no MKL."""
    import ctypes

    import torch

    if not torch.backends.mkl.is_available():
        return None
    try:  # torch links MKL into libtorch_cpu and exports MKL's service functions from it
        query = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    query.argtypes, query.restype = [ctypes.c_int], ctypes.c_int
    code = query(1)  # MKL_CBWR_BRANCH
    return MKL_BRANCHES.get(code, f"code {code}")


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), for provenance: kernels differ between vendors."""
    return _cpuinfo("model name")


def capability() -> dict[str, str | None]:
    """Provenance: torch's CPU capability, MKL's branch and the pins in force (torch's and MKL's only where
    torch is loaded, or a pin is set: then torch is loaded to check it). Raises CpuKernelsError when torch
    or MKL runs another level than ``OAR_CPU_KERNELS`` asks for."""
    record: dict[str, str | None] = {"capability": None, "mkl_branch": None, VARIABLE: os.environ.get(VARIABLE) or None}
    for name in LEVELS["default"][1]:
        record[name] = os.environ.get(name)
    level = record[VARIABLE]
    if "torch" in sys.modules or level:
        import torch

        record["capability"] = torch.backends.cpu.get_cpu_capability()
        record["mkl_branch"] = mkl_branch()
        if level and record["capability"] != CAPABILITY.get(level):
            raise CpuKernelsError(f"{VARIABLE}={level}: torch runs at {record['capability']}, "
                                  f"not {CAPABILITY.get(level)}")
        wanted = LEVELS[level][1]["MKL_CBWR"].split(",")[0] if level in LEVELS else None
        if wanted and record["mkl_branch"] not in (None, wanted):
            raise CpuKernelsError(
                f"{VARIABLE}={level}: MKL runs its {record['mkl_branch']} branch, not {wanted} (MKL takes its "
                f"AVX2 and AVX512 branches only on Intel CPUs), so this CPU cannot give the pinned runs' "
                f"bits: run without a pin (snakemake --config cpu_kernels=none; the numbers then agree "
                f"within seed noise)")
    return record


def override(config_files: list[str]) -> str:
    """``cpu_kernels=none`` where this CPU cannot honour the level the config files pin (the last file
    that sets ``cpu_kernels`` decides, as Snakemake merges them), else nothing: what `make run` and its
    siblings add to Snakemake's ``--config``, so that the README's commands run on any CPU, pinned where
    the pin holds. The reason goes to stderr."""
    import yaml

    level = None
    for path in config_files:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f) or {}
        if "cpu_kernels" in config:
            level = config["cpu_kernels"]
    if level in (None, "none"):
        return ""
    reason = unhonoured(level)
    if reason is None:
        return ""
    print(f"{reason}: running unpinned (cpu_kernels=none); the numbers are another draw of the experiment, "
          "not the published tables (docs/reproducibility.md)", file=sys.stderr)
    return "cpu_kernels=none"
