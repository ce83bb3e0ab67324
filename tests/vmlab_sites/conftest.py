"""Two VM lab guests as SSH sites (tunbench.vmlab.sites), booted once per module.

It is its own target, `make vmlab-sites` (TUNBENCH_VMLAB_SITES=1): two TCG guests and a
eight-case campaign took 5.5-11 min on this 2-core host, more than `make test`'s budget allows
(measured in docs/vmlab.md). Otherwise it skips with that reason. It also skips with the
one-line reason when the VM lab cannot be built or booted here, and with TUNBENCH_VMLAB=0. Booted, a guest that does not serve SSH in time is a failure. At the
end both qemu processes must be gone (stopped by PID) and the run's directory removed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tunbench import proc
from tunbench.errors import UnavailableError
from tunbench.vmlab import sites

ENABLE_ENV = "TUNBENCH_VMLAB"
SITES_ENV = "TUNBENCH_VMLAB_SITES"   # "1": run the two-guest tier (make vmlab-sites)


@pytest.fixture(scope="module")
def pair() -> Iterator[sites.SitePair]:
    if os.environ.get(ENABLE_ENV) == "0":
        pytest.skip(f"VM lab tier disabled ({ENABLE_ENV}=0)")
    if os.environ.get(SITES_ENV) != "1":
        pytest.skip(f"the two-guest VM tier is its own target: make vmlab-sites ({SITES_ENV}=1;"
                    " 6-11 min on a 2-core host)")
    if os.geteuid() != 0:
        pytest.skip("the two-guest VM tier needs root (the VM lab image build)")
    started: list[sites.SitePair] = []
    qemus: list[tuple[int, int | None]] = []
    try:
        with sites.site_pair() as p:
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
