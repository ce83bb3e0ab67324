# VM lab targets, for the project Makefile to `include mk/vmlab.mk`.
# Host packages are in deps/apt-vmlab.txt (installed by scripts/install-deps.sh).
VMLAB_PY ?= .venv/bin/python

.PHONY: vmlab-host-deps vmlab-image vmlab-test vmlab-info vmlab-prune

vmlab-host-deps:
	@scripts/install-deps.sh

vmlab-image: vmlab-host-deps
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab build

vmlab-test:
	PYTHONPATH=src $(VMLAB_PY) -m pytest -m vmlab tests/vmlab_bridge

vmlab-info:
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab info

vmlab-prune:
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab prune
