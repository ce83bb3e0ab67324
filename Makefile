# tunbench: `make run` and `make test` install what is missing, then do their job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_ARGS ?=
RUN_ARGS ?= --tunnels all --duration 5 --repeats 3

.PHONY: run test deps venv loadgen bpf lint typecheck bench cleanup clean

run: deps venv loadgen bpf
	$(VENV)/bin/tunbench run $(RUN_ARGS)

test: deps venv loadgen bpf
	$(PY) -m pytest $(TEST_ARGS)

deps:
	@scripts/install-deps.sh

venv: $(STAMP)

# Rebuilt when pyproject.toml changes; pip installs only what is missing.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

# The native UDP load generator (Rust, edition 2024: needs cargo >= 1.85). Without a suitable
# cargo: one line, and the loss-search workload reports itself unavailable (tests skip).
CARGO ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
loadgen:
	@if [ -x "$(CARGO)" ] && "$(CARGO)" --version 2>/dev/null | awk '{split($$2,v,"."); exit !(v[1]>1 || v[2]>=85)}'; then \
		cd loadgen && "$(CARGO)" build --release --locked --quiet; \
	else echo "loadgen: no cargo >= 1.85 found (install Rust >= 1.85, e.g. with rustup); loss-search will be unavailable"; fi

# tbtun's eBPF datapath (bpf/<name>.bpf.c -> build/bpf/<name>.bpf.o) with Debian's clang and
# libbpf-dev headers (deps/apt-ebpf.txt). One object serves every site: settings are map values.
BPF_SRC := $(wildcard bpf/*.bpf.c)
BPF_OBJ := $(patsubst bpf/%.bpf.c,build/bpf/%.bpf.o,$(BPF_SRC))
BPF_CFLAGS := -O2 -g -Wall -Werror -target bpf -I/usr/include/$(shell gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
bpf: deps $(BPF_OBJ)

build/bpf/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.h)
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -c $< -o $@

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
