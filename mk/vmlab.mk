# VM lab targets, for the project Makefile to `include mk/vmlab.mk`.
# The host package list comes from tunbench.vmlab.image.HOST_PACKAGES (one source of truth).
PYTHON ?= .venv/bin/python
VMLAB_HOST_PACKAGES = $(shell PYTHONPATH=src python3 -m tunbench.vmlab host-packages)

.PHONY: vmlab-host-deps vmlab-image vmlab-test vmlab-info vmlab-prune

vmlab-host-deps:
	apt-get install -y --no-install-recommends $(VMLAB_HOST_PACKAGES)

vmlab-image: vmlab-host-deps
	PYTHONPATH=src $(PYTHON) -m tunbench.vmlab build

vmlab-test:
	PYTHONPATH=src $(PYTHON) -m pytest -m vmlab tests/vmlab_bridge

vmlab-info:
	PYTHONPATH=src $(PYTHON) -m tunbench.vmlab info

vmlab-prune:
	PYTHONPATH=src $(PYTHON) -m tunbench.vmlab prune
