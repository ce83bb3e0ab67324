"""The hub-and-spokes address plan (testbed/hub.py) without root: every site's /30, inner
address and MAC are distinct and inside the benchmarking ranges up to the 1000-spoke limit."""

from __future__ import annotations

import ipaddress

import pytest

from tunbench.errors import SpecError
from tunbench.testbed import hub


def test_addresses_and_macs_are_distinct_and_in_the_benchmarking_ranges() -> None:
    n = hub.MAX_SPOKES
    assert hub.underlay(0) == ("198.18.0.1", "198.18.0.2")
    nets = [ipaddress.ip_network(f"{hub.underlay(i)[1]}/30", strict=False) for i in range(n + 1)]
    assert len(set(nets)) == n + 1
    assert all(net.subnet_of(ipaddress.ip_network(hub.UNDERLAY)) for net in nets)
    for i in (0, 1, 255, 256, n):
        gw, addr = hub.underlay(i)
        assert ipaddress.ip_address(gw) in nets[i] and ipaddress.ip_address(addr) in nets[i]
    inner = {hub.inner(i) for i in range(n + 1)}
    assert len(inner) == n + 1 and hub.inner(0) == "198.19.0.1"
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("198.19.0.0/16") for a in inner)
    macs = {hub.spoke_mac(i) for i in range(1, n + 1)}
    assert len(macs) == n and hub.HUB_MAC not in macs
    assert hub.spoke_mac(258) == "02:74:62:01:01:02"


@pytest.mark.parametrize("n", [0, -1, hub.MAX_SPOKES + 1])
def test_spoke_count_out_of_range_is_one_clear_error(n: int) -> None:
    with pytest.raises(SpecError, match=f"spokes {n} is not within 1..1000") as exc:
        hub.check_spokes(n)
    assert "198.18.0.0/16" in exc.value.hint and exc.value.exit_code == 2
