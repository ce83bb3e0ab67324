# VM lab targets, for the project Makefile to `include mk/vmlab.mk`.
# Host packages are in deps/apt-vmlab.txt (installed by scripts/install-deps.sh).
VMLAB_PY ?= .venv/bin/python

.PHONY: vmlab-host-deps vmlab-image vmlab-test vmlab-sites vmlab-sites-up vmlab-info vmlab-prune

vmlab-host-deps:
	@scripts/install-deps.sh

vmlab-image: vmlab-host-deps
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab build

vmlab-test:
	PYTHONPATH=src $(VMLAB_PY) -m pytest -m vmlab tests/vmlab_bridge

# Two guests (two real kernels) as SSH sites, a campaign between them over `--site`
# (tests/vmlab_sites; docs/vmlab.md "Two guests as SSH sites").
vmlab-sites: vmlab-image
	PYTHONPATH=src $(VMLAB_PY) -m pytest -m vmlab tests/vmlab_sites -rA -s

# The same pair kept up for your own `tunbench run --site ...` until Ctrl-C.
vmlab-sites-up: vmlab-image
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab sites

vmlab-info:
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab info

vmlab-prune:
	PYTHONPATH=src $(VMLAB_PY) -m tunbench.vmlab prune
