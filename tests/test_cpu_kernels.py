"""oar.cpu_kernels: the pinned instruction set of the CPU kernels, in fresh processes (each library reads its
variable once, on first use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from oar import cpu_kernels
from oar.cpu_kernels import CAPABILITY, LEVELS, CpuKernelsError, environment, override, unhonoured

ROOT = Path(__file__).resolve().parents[1]
# A few updates of a small Llama on one thread, the testbed's kind of work: its weights' bytes
TRAIN = r"""
import hashlib, json, oar, torch
from transformers import LlamaConfig, LlamaForCausalLM
from oar.cpu_kernels import capability
torch.set_num_threads(1)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 64, (8, 33))
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"digest": digest, **capability()}))
"""


def run(code: str, level: str | None, launcher: Sequence[str] = (), **extra: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python pinned to ``level`` (None: unpinned), with ``extra`` in its environment;
    ``launcher``: a command that runs it (tests/cpu_kinds: QEMU's emulator of another CPU)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OAR_CPU_KERNELS", *LEVELS["default"][1], "OMP_NUM_THREADS")} | extra
    if level is not None:
        env["OAR_CPU_KERNELS"] = level
    return subprocess.run([*launcher, sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


def offered(level: str) -> bool:
    try:
        environment(level)
    except CpuKernelsError:
        return False
    return True


def test_unknown_level_names_it():
    with pytest.raises(CpuKernelsError, match=r"OAR_CPU_KERNELS \(config key cpu_kernels\): unknown level 'avx9'"):
        environment("avx9")
    proc = run("import oar", "avx9")
    assert proc.returncode != 0 and "unknown level 'avx9'" in proc.stderr


def test_a_level_the_cpu_lacks_stops_naming_it_and_what_is_missing():
    if not offered("avx2"):
        pytest.skip("not an x86-64 CPU with AVX2")
    with pytest.raises(CpuKernelsError, match=r"OAR_CPU_KERNELS=avx512: this CPU does not offer avx512f, avx512bw"):
        environment("avx512", flags={"avx", "avx2", "fma"})  # an AVX2-only CPU
    assert environment("avx2", flags={"avx", "avx2", "fma"})["MKL_CBWR"] == "AVX2,STRICT"
    for level in LEVELS:  # on this machine: each level runs, or stops before torch runs anything
        proc = run("import oar, torch; print(torch.backends.cpu.get_cpu_capability())", level)
        if offered(level):
            assert proc.returncode == 0 and proc.stdout.split()[-1] == CAPABILITY[level], proc.stderr
        else:
            assert proc.returncode != 0 and f"OAR_CPU_KERNELS={level}: this CPU does not offer" in proc.stderr


def test_a_library_variable_set_otherwise_is_an_error():
    proc = run("import oar", "avx2", ATEN_CPU_CAPABILITY="avx512")
    assert proc.returncode != 0 and "the environment has ATEN_CPU_CAPABILITY=avx512" in proc.stderr


def test_torch_that_already_ran_at_another_level_is_an_error():
    if not offered("avx2") or not offered("avx512"):
        pytest.skip("needs a CPU with AVX-512")
    proc = run("import torch; torch.ones(3).sum(); import oar", "avx2")
    assert proc.returncode != 0 and "torch already runs at AVX512" in proc.stderr


def test_mkl_runs_its_pinned_code_path():
    if unhonoured("avx2"):
        pytest.skip(unhonoured("avx2"))
    proc = run("import oar, torch; torch.randn(16, 16) @ torch.randn(16, 16)", "avx2", MKL_VERBOSE="1")
    assert proc.returncode == 0, proc.stderr
    assert "CNR:AVX2,STRICT" in proc.stdout  # MKL_VERBOSE's report of each call's reproducibility branch


def test_mkl_reports_the_branch_it_runs():
    if unhonoured("avx2"):
        pytest.skip(unhonoured("avx2"))
    code = "import json, oar; from oar.cpu_kernels import capability; print(json.dumps(capability()))"
    assert json.loads(run(code, "avx2").stdout.splitlines()[-1])["mkl_branch"] == "AVX2"
    assert json.loads(run("import torch; " + code, None).stdout.splitlines()[-1])["mkl_branch"] == "OFF"


def test_a_branch_mkl_did_not_take_stops_naming_it():
    """What an AMD CPU does (tests/cpu_kinds shows it on an emulated one): MKL keeps its own branch. Here
    MKL is started on its AUTO branch before the pin is declared."""
    if not offered("avx2"):
        pytest.skip("not an x86-64 CPU with AVX2")
    code = ("import os, torch; torch.randn(4, 4) @ torch.randn(4, 4); "
            "os.environ.update(OAR_CPU_KERNELS='avx2', MKL_CBWR='AVX2,STRICT', ONEDNN_MAX_CPU_ISA='AVX2'); "
            "from oar.cpu_kernels import capability; capability()")
    proc = run(code, None, ATEN_CPU_CAPABILITY="avx2", MKL_CBWR="AUTO,STRICT")
    assert proc.returncode != 0
    assert "OAR_CPU_KERNELS=avx2: MKL runs its AUTO branch, not AVX2" in proc.stderr, proc.stderr[-2000:]


def test_pinned_training_is_bitwise_repeatable_and_differs_from_a_wider_level():
    if unhonoured("avx2"):
        pytest.skip(unhonoured("avx2"))
    first, second, native = (json.loads(run(TRAIN, level).stdout.splitlines()[-1]) for level in ("avx2", "avx2", None))
    assert first == second and first["capability"] == "AVX2" and first["MKL_CBWR"] == "AVX2,STRICT"
    assert native["OAR_CPU_KERNELS"] is None and native["ATEN_CPU_CAPABILITY"] is None
    if native["capability"] != "AVX2":  # a wider CPU: its own kernels add in another order
        assert native["digest"] != first["digest"]


def test_the_vector_levels_are_honoured_on_intel_cpus_only():
    """MKL takes its AVX2 and AVX512 branches only on Intel CPUs: the check before anything runs says so."""
    avx2 = {"avx", "avx2", "fma"}
    assert unhonoured("avx2", flags=avx2, vendor="GenuineIntel") is None
    assert "this CPU is AuthenticAMD, and MKL takes its AVX2 branch only on Intel CPUs" in \
        unhonoured("avx2", flags=avx2, vendor="AuthenticAMD")
    assert "does not offer avx512f" in unhonoured("avx512", flags=avx2, vendor="GenuineIntel")
    assert unhonoured("default", flags=set(), vendor="AuthenticAMD") is None  # MKL takes COMPATIBLE anywhere


def test_the_check_agrees_with_what_mkl_does_on_this_machine():
    """Where the check says avx2 is honoured here, a pinned process runs MKL's AVX2 branch; where it says
    not, the pinned process stops as its provenance is read."""
    if not offered("avx2"):
        pytest.skip("not an x86-64 CPU with AVX2")
    code = "import json, oar; from oar.cpu_kernels import capability; print(json.dumps(capability()))"
    proc = run(code, "avx2")
    if unhonoured("avx2") is None:
        assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[-1])["mkl_branch"] == "AVX2"
    else:
        assert proc.returncode != 0 and "MKL runs its AUTO branch, not AVX2" in proc.stderr, proc.stderr[-2000:]


def test_make_run_unpins_only_where_the_pin_cannot_hold(tmp_path, capsys):
    """`make run` and its siblings add override()'s answer to Snakemake's --config: nothing where the
    configs' pin holds, cpu_kernels=none with the reason on stderr where it does not; the last config
    file that sets the key decides."""
    assert override([str(ROOT / "config" / "config.yaml")]) == ("" if unhonoured("avx2") is None
                                                                else "cpu_kernels=none")
    unpinned = tmp_path / "unpinned.yaml"
    unpinned.write_text("cpu_kernels: none\n")
    assert override([str(ROOT / "config" / "config.yaml"), str(unpinned)]) == ""
    impossible = tmp_path / "arm.yaml"
    impossible.write_text("cpu_kernels: avx9\n")
    capsys.readouterr()
    assert override([str(impossible)]) == "cpu_kernels=none"
    said = capsys.readouterr().err
    assert "unknown level 'avx9'" in said and "running unpinned (cpu_kernels=none)" in said


def test_provenance_records_the_capability():
    sys.path.insert(0, str(ROOT / "workflow_scripts"))
    try:
        from _script_io import provenance
    finally:
        sys.path.remove(str(ROOT / "workflow_scripts"))
    import torch

    record = provenance({"x": 1})["cpu_kernels"]
    assert record["capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(record) == {"capability", "mkl_branch", "OAR_CPU_KERNELS", "ATEN_CPU_CAPABILITY", "MKL_CBWR",
                           "ONEDNN_MAX_CPU_ISA"}
    assert cpu_kernels.apply({}) is None  # nothing pinned without OAR_CPU_KERNELS
