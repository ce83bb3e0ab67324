"""Two VM lab guests as SSH sites (tunbench.vmlab.sites), booted once per module.

Part of `make test` (one ten-case campaign; `make vmlab-sites` runs it alone). It skips with
the one-line reason when the VM lab cannot be built or booted here, with TUNBENCH_VMLAB=0 (all
VM tiers) and with TUNBENCH_VMLAB_SITES=0 (this one). Booted, a guest that does not serve SSH
in time is a failure. At the end both qemu processes must be gone (stopped by PID) and the
run's directory removed. Guest b boots without iperf3, which its own apt-get can install
from a local repository inside it (vmlab/guestrepo.py): `tunbench prepare` does so before the
campaign.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tunbench import proc
from tunbench.errors import UnavailableError
from tunbench.vmlab import sites

ENABLE_ENV = "TUNBENCH_VMLAB"
SITES_ENV = "TUNBENCH_VMLAB_SITES"   # "0": skip the two-guest tier


@pytest.fixture(scope="module")
def pair() -> Iterator[sites.SitePair]:
    if os.environ.get(ENABLE_ENV) == "0":
        pytest.skip(f"VM lab tier disabled ({ENABLE_ENV}=0)")
    if os.environ.get(SITES_ENV) == "0":
        pytest.skip(f"two-guest VM tier disabled ({SITES_ENV}=0)")
    if os.geteuid() != 0:
        pytest.skip("the two-guest VM tier needs root (the VM lab image build)")
    started: list[sites.SitePair] = []
    qemus: list[tuple[int, int | None]] = []
    try:
        # guest b lacks iperf3 (its apt-get has it in a local repository): tunbench prepare
        # installs it before the campaign (test_two_guests.py)
        with sites.site_pair(without={"b": ["iperf3"]}) as p:
            started.append(p)
            qemus.extend((s.process.pid, s.process.starttime) for s in p.sites.values()
                         if s.process is not None)
            yield p
    except UnavailableError as exc:
        if started:
            raise
        pytest.skip(f"VM lab unavailable: {exc.one_line()}")
    for p in started:
        assert not p.dir.exists(), f"{p.dir} left behind"
    alive = [pid for pid, start in qemus if proc.pid_alive(pid, start)]
    assert not alive, f"qemu still running: {alive}"
