# tunbench: `make run` and `make test` install what is missing, then do their job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_ARGS ?=
RUN_ARGS ?= --tunnels all --duration 5 --repeats 3

.PHONY: run test deps venv lint typecheck bench cleanup clean

run: deps venv
	$(VENV)/bin/tunbench run $(RUN_ARGS)

test: deps venv
	$(PY) -m pytest $(TEST_ARGS)

deps:
	@scripts/install-deps.sh

venv: $(STAMP)

# Rebuilt when pyproject.toml changes; pip installs only what is missing.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: deps venv
	$(PY) bench/run_all.py

cleanup: venv
	$(VENV)/bin/tunbench cleanup

include mk/vmlab.mk

clean:
	rm -rf $(VENV) build src/*.egg-info
