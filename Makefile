# tunbench: `make run` and `make test` install what is missing, then do their job.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_ARGS ?=
RUN_ARGS ?= --tunnels all --workloads stream,latency --duration 5 --budget 20m
BINDIR ?= /usr/local/bin
TB_BIN := $(CURDIR)/$(VENV)/bin/tunbench

.PHONY: run test test-repeat fuzz deps venv loadgen bpf link unlink lint typecheck bench cleanup clean

run: deps venv loadgen bpf link
	$(VENV)/bin/tunbench run $(RUN_ARGS)

# `tunbench` on PATH, as the README types it: a symlink $(BINDIR)/tunbench -> this checkout's
# venv entry point. Idempotent; a tunbench there that is not a symlink is left alone, and
# an unwritable $(BINDIR) only prints the path to use instead.
link: venv
	@link="$(BINDIR)/tunbench"; \
	if [ "$$(readlink "$$link" 2>/dev/null)" = "$(TB_BIN)" ]; then :; \
	elif [ -e "$$link" ] && [ ! -L "$$link" ]; then \
		echo "link: $$link exists and is not a symlink, left alone; run $(TB_BIN)"; \
	elif [ -d "$(BINDIR)" ] && [ -w "$(BINDIR)" ]; then \
		ln -sfn "$(TB_BIN)" "$$link" && echo "link: $$link -> $(TB_BIN)"; \
	else echo "link: cannot write $(BINDIR); run $(TB_BIN) or add $(CURDIR)/$(VENV)/bin to PATH"; fi

unlink:
	@link="$(BINDIR)/tunbench"; \
	if [ "$$(readlink "$$link" 2>/dev/null)" = "$(TB_BIN)" ]; then rm -f "$$link" && echo "unlink: removed $$link"; fi

# Two phases (scripts/test_phases.py): the pure tiers on every core, then the live tiers one
# test at a time; one summary of both. TEST_ARGS given: one plain pytest with them.
test: deps venv loadgen bpf
	$(PY) scripts/test_phases.py $(TEST_ARGS)

# The flake finder (scripts/test_repeat.py): the live tier N times in a row, or TESTS (pytest
# paths, node ids or options) instead; then the tests that failed in any run, in how many and
# with which messages, the skips, the 10 slowest tests and each run's counts; also as JSON.
N ?= 3
TESTS ?=
test-repeat: deps venv loadgen bpf
	$(PY) scripts/test_repeat.py -n $(N) -- $(TESTS)

# The input fuzz test with a long budget and a fresh seed each run (make test runs it with a
# small fixed budget and seed). FUZZ_EXAMPLES is per property.
FUZZ_EXAMPLES ?= 3000
fuzz: venv
	TUNBENCH_FUZZ=long TUNBENCH_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest \
		tests/unit/test_input_fuzz.py $(TEST_ARGS)

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

clean: unlink
	rm -rf $(VENV) build src/*.egg-info
