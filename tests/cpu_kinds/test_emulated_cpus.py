"""The pinned CPU kernels on CPUs of other kinds, emulated on this machine by QEMU's user-mode emulator
(`qemu-x86_64 -cpu MODEL`): the program sees that CPU's CPUID (vendor and instruction sets), by which
torch, MKL and oneDNN pick their kernels, and each instruction is executed exactly.

`make test-cpu-kinds` installs qemu-user (root, apt) and sets OAR_TEST_CPU_KINDS=1; without it these tests
are skipped. About 18 minutes on 2 loaded cores: an emulated process runs tens to hundreds of times slower than a
native one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# TRAIN: a few AdamW updates of a small Llama, printing its weights' digest; run: a fresh pinned Python
from test_cpu_kernels import TRAIN, run  # noqa: E402

from oar.cpu_kernels import unhonoured  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EMULATOR = shutil.which("qemu-x86_64")
pytestmark = [
    pytest.mark.skipif(os.environ.get("OAR_TEST_CPU_KINDS") != "1",
                       reason="needs QEMU's user-mode emulator: run `make test-cpu-kinds` (sets OAR_TEST_CPU_KINDS=1)"),
    pytest.mark.slow,
]
INTEL_AVX2 = "Haswell"  # an Intel CPU with AVX2 and FMA, no AVX-512
AMD_AVX2 = "EPYC-Rome"  # an AMD one


def python(code: str, level: str | None, cpu: str | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, natively (``cpu`` None) or on the emulated ``cpu``, pinned to ``level``."""
    assert EMULATOR, "qemu-x86_64 not found: `make test-cpu-kinds` installs it (apt-get install qemu-user)"
    return run(code, level, launcher=[] if cpu is None else [EMULATOR, "-cpu", cpu])


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_avx2_only_intel_cpu_trains_the_pinned_bits():
    if unhonoured("avx2"):  # e.g. an AMD host, whose MKL keeps its own branch: no native bits to compare with
        pytest.skip(f"this machine cannot run the avx2 level natively: {unhonoured('avx2')}")
    native = last_json(python(TRAIN, "avx2"))
    emulated = last_json(python(TRAIN, "avx2", INTEL_AVX2))
    unpinned = last_json(python(TRAIN, None, INTEL_AVX2))
    assert unpinned["capability"] == "AVX2"  # the emulated CPU offers no more than AVX2
    assert emulated["capability"] == native["capability"] == "AVX2"
    assert emulated["mkl_branch"] == native["mkl_branch"] == "AVX2"
    assert emulated["digest"] == native["digest"]  # the same weights, bit for bit


def test_an_amd_cpu_stops_a_pin_that_mkl_does_not_take():
    record = ("import json, oar; from oar.cpu_kernels import capability, mkl_branch; import torch; "
              "print(json.dumps({'torch': torch.backends.cpu.get_cpu_capability(), 'mkl': mkl_branch()}))")
    unpinned = last_json(python(record, None, AMD_AVX2))
    assert unpinned == {"torch": "AVX2", "mkl": "OFF"}
    # torch honours the pin, MKL keeps its own branch on a CPU that is not Intel's: the job stops, naming it
    pinned = python("import oar; from oar.cpu_kernels import capability; capability()", "avx2", AMD_AVX2)
    assert pinned.returncode != 0
    assert "OAR_CPU_KERNELS=avx2: MKL runs its AUTO branch, not AVX2" in pinned.stderr, pinned.stderr[-2000:]


# The token-credit benchmark's scores of one shipped response: a forward scorer (entropy) and a gradient
# one (OAR-G), as the sha256 of their float64 bytes. One response, because an emulated forward is about a
# thousand times slower than a native one.
SCORE_ONE = r"""
import hashlib, json, oar, torch
from oar.bench import response_set
from oar.cpu_kernels import capability
from oar.method.importance import score
from oar.models.frozen import policy_dir
from oar.models.loading import load_model
model, tokenizer = load_model(policy_dir("chain_f1"), dtype="float32", device="cpu", threads=1)
probe = response_set.load("chain_f1").subset(1).probes(tokenizer)[0]
digests = {}
for scorer in ("entropy", "oar_g"):
    row = score(scorer, model, [probe], seed=0, groups=[0], rewards=[1.0]).scores[0, : probe.reasoning_len]
    digests[scorer] = hashlib.sha256(row.double().numpy().tobytes()).hexdigest()
print(json.dumps({**digests, "capability": capability()["capability"]}))
"""


def test_an_avx2_only_intel_cpu_gives_the_benchmarks_scores_bit_for_bit():
    if unhonoured("avx2"):
        pytest.skip(f"this machine cannot run the avx2 level natively: {unhonoured('avx2')}")
    native = last_json(python(SCORE_ONE, "avx2"))
    emulated = last_json(python(SCORE_ONE, "avx2", INTEL_AVX2))
    assert emulated == native
