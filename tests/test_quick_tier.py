"""The quick tier's guard (tests/conftest.py): inside a test marked ``quick`` an optimizer step and a
snakemake process are errors, so no test that trains or starts Snakemake can stay in `make test-quick`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import starts_snakemake  # tests/conftest.py, the guard itself

pytestmark = pytest.mark.quick


def test_a_quick_test_cannot_step_an_optimizer():
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    weight.sum().backward()
    with pytest.raises(AssertionError, match="test_a_quick_test_cannot_step_an_optimizer is marked quick"):
        optimizer.step()
    assert torch.equal(weight.detach(), torch.ones(2))  # the step did not happen


def test_a_quick_test_cannot_start_snakemake():
    snakemake = Path(sys.executable).with_name("snakemake")
    with pytest.raises(AssertionError, match="marked quick but starts Snakemake"):
        subprocess.run([snakemake, "--version"], capture_output=True)
    with pytest.raises(AssertionError, match="marked quick but starts Snakemake"):
        subprocess.run(f"{sys.executable} -m snakemake --version", shell=False, capture_output=True)
    # any other process starts as usual
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


@pytest.mark.parametrize("argv, expected", [
    (["/x/.venv/bin/snakemake", "-n", "all"], True),
    (["python", "-m", "snakemake", "all"], True),
    ("snakemake --cores 2 all", True),
    ([b"/usr/bin/snakemake"], True),
    (["/bin/sh", "-c", "cd /tmp && snakemake -n"], True),
    (["python", "workflow_scripts/train.py", "--snakemake-log", "x"], False),
    (["git", "rev-parse", "HEAD"], False),
])
def test_snakemake_is_told_from_other_commands(argv, expected):
    assert starts_snakemake(argv) is expected
