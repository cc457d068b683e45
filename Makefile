# Two commands on a fresh machine: `make run` and `make test`. Both install first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CORES  ?= all
# `make run MIRROR=/path/or/url` fetches MNIST from that folder or URL instead of the public mirrors.
MIRROR ?=
MIRROR_ARG := $(if $(MIRROR),--config 'dataset={"mirrors": ["$(MIRROR)"]}',)

CLUSTER_STAMP := $(VENV)/.cluster-stamp
MUTATION_STAMP := $(VENV)/.mutation-stamp

# `make install GPU=cuda13` (or cuda12) adds JAX's CUDA plugin, at the jax version requirements.lock
# pins, from requirements-gpu-<flavour>.lock (docs/gpu.md). Without GPU, install is the CPU lock alone.
GPU ?=
GPU_FLAVOURS := cuda12 cuda13
ifneq ($(GPU),)
ifeq ($(filter $(GPU),$(GPU_FLAVOURS)),)
$(error GPU=$(GPU) is not a CUDA flavour gradlanes pins: use GPU=cuda13 (NVIDIA driver >= 580) or GPU=cuda12 (driver >= 525); see docs/gpu.md)
endif
endif
GPU_STAMP := $(if $(GPU),$(VENV)/.gpu-$(GPU)-stamp)

.PHONY: install install-cluster run test test-deep check test-numerics test-numerics-ci calibrate test-cluster \
	mutation lint clean-venv

# The tests run on one pytest-xdist worker per core this process may use (nproc: its CPU affinity),
# at most 8: beyond that the suite's longest tests, not its workers, set the time.
# `make test TEST_WORKERS=1` runs them in one worker.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 8 ? n : 8 )))
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS)

install: $(STAMP) $(GPU_STAMP)

# The stamp re-installs only when the lock or the package metadata changed.
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# One CUDA flavour at a time (two plugins would both claim the GPU): the other's is removed first
# (-qq: silent where it is not installed).
# Re-installs when the GPU lock or the CPU install changed; -c keeps every pin of requirements.lock.
$(VENV)/.gpu-%-stamp: $(STAMP) requirements-gpu-%.lock
	$(BIN)/python -m pip uninstall --quiet --quiet --disable-pip-version-check -y \
		$(foreach other,$(filter-out $*,$(GPU_FLAVOURS)),jax-$(other)-plugin jax-$(other)-pjrt)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -r requirements-gpu-$*.lock
	rm -f $(VENV)/.gpu-*-stamp
	touch $@

run: install
	$(BIN)/snakemake --cores $(CORES) $(MIRROR_ARG)
	$(BIN)/gradlanes readme

# Every test, each property test with CI's count of generated cases (tests/hypothesis_profiles.py).
test: install
	$(PYTEST)

# The same with ten times the generated cases, beyond the ones CI runs (long: tens of minutes).
test-deep: install
	$(PYTEST) --hypothesis-profile deep

# The editing loop: lint, then the tests that start no subprocess of the pipeline, with a tenth of the
# cases. XLA's executables are kept between runs (keyed on the exact program, flags and JAX version:
# tests/conftest.py says why that is honest), so a second run compiles only what changed.
check: lint
	JAX_COMPILATION_CACHE_DIR=$(abspath $(VENV))/xla-cache $(PYTEST) -m "not slow" --hypothesis-profile quick

# The numerics-marked tests and the CI-subset DAG under every OpenBLAS core type x XLA ISA x thread
# count this CPU can run; writes results/checks/numerics.md. Cells the CPU cannot run are skipped.
test-numerics: install
	$(BIN)/python tests/numerics/matrix.py

# CI's share of the matrix: a covering set of its NumPy and XLA results on this CPU (tests/numerics/cover.py).
# .ci/run adds COVER_ARGS=--default-tested: make test, just passed, ran under the default kernels.
COVER_ARGS ?=
test-numerics-ci: install
	$(BIN)/python tests/numerics/matrix.py --cover $(COVER_ARGS)

# Re-measure the calibrated agreement bounds (long: every lane on 5 held-out seeds under 3 cells,
# for config.yaml and for the CI subset); writes results/checks/calibration*.{json,md}.
calibrate: install
	$(BIN)/python tests/numerics/calibrate.py
	$(BIN)/python tests/numerics/calibrate.py --config .test/config.yaml --name subset

# The CI subset through Snakemake's SLURM executor on a single-node SLURM started here (root, Debian).
$(CLUSTER_STAMP): $(STAMP) requirements-cluster.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-cluster.lock
	touch $@

install-cluster: $(CLUSTER_STAMP)

test-cluster: $(CLUSTER_STAMP)
	bash tests/cluster/run.sh

# Mutation testing (mutmut) of the modules that compute or check what the project claims, listed
# in pyproject.toml [tool.mutmut]: re-measures each module whose source changed since its record in
# results/checks/mutation.json (or that has none), then writes results/checks/mutation.md
# (tools/mutation.py; `tools/mutation.py` with no option re-measures every module: hours).
$(MUTATION_STAMP): $(STAMP) requirements-mutation.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-mutation.lock
	touch $@

mutation: $(MUTATION_STAMP)
	$(BIN)/python tools/mutation.py --stale

# snakemake --lint exits 1 for its conda/container lint, which gradlanes answers in docs/design.md
# ("Why one lint stays"); any other lint fails this target.
lint: install
	$(BIN)/ruff check src tests workflow/scripts
	@out=$$(mktemp); $(BIN)/snakemake --lint > $$out 2>&1 || true; \
	if grep -E '^\s*\* ' $$out | grep -v 'Specify a conda environment or container'; then \
		cat $$out; rm -f $$out; exit 1; fi; \
	rm -f $$out; echo "snakemake --lint: only the conda/container lint (docs/design.md: Why one lint stays)"

clean-venv:
	rm -rf $(VENV)
