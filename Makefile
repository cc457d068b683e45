# Two commands on a fresh machine: `make run` and `make test`. Both install first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CORES  ?= all
# `make run MIRROR=/path/or/url` fetches MNIST from that folder or URL instead of the public mirrors.
MIRROR ?=
MIRROR_ARG := $(if $(MIRROR),--config 'dataset={"mirrors": ["$(MIRROR)"]}',)

.PHONY: install run test lint clean-venv

install: $(STAMP)

# The stamp re-installs only when the lock or the package metadata changed.
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

run: install
	$(BIN)/snakemake --cores $(CORES) $(MIRROR_ARG)
	$(BIN)/gradlanes readme

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check src tests workflow/scripts
	$(BIN)/snakemake --lint

clean-venv:
	rm -rf $(VENV)
