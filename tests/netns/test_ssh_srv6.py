"""ssh-tun, ssh-forward and srv6 with real daemons and traffic; each proves its path was used."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinds_here import skip_unless_here
from tunbench import proc, tunnels
from tunbench.testbed import netlink
from tunbench.testbed.base import Testbed
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

SYSTEM_SSHD_PID = Path("/run/sshd.pid")


def _delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
           site: str, key: str) -> int:
    return after[site][key] - before[site].get(key, 0)


def _stream(tb: Testbed, drv: type, ep: tunnels.Endpoints, family: int = 4
            ) -> tuple[int, dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    before = drv().counters(tb, ep)
    out = Stream().run(Context(tb, ep, duration=2, warmup=0, family=family),  # type: ignore
                       StreamParams())
    after = drv().counters(tb, ep)
    got = int(out.raw["iperf3"]["bytes_received"])
    assert got > 1_000_000
    return got, before, after


def _assert_gone(tb: Testbed, pids: list[int]) -> None:
    errors = tb.ledger.close()
    assert not errors, errors
    assert not [p for p in pids if proc.pid_alive(p)], "processes left behind"
    assert not tb.workdir.exists(), "workdir (keys, configs, logs) left behind"


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com"])
def test_ssh_tun_carries_iperf3_through_the_tun(testbed: Testbed, cipher: str,
                                                root_unchanged: None) -> None:
    sshd_pid_before = SYSTEM_SSHD_PID.exists()
    drv = tunnels.get("ssh-tun")
    ep = drv().up(testbed, drv.parse_params({"cipher": cipher}))
    assert netlink.link_mtu(testbed.a.netns, str(ep.a_ifname)) == ep.mtu == 1500 - 105 + (
        8 if cipher.startswith("chacha") else 0)
    assert "tun0" not in netlink.link_names(testbed.a.netns)   # renamed to tb<rid>s
    got, before, after = _stream(testbed, drv, ep)
    # every byte iperf3 received went through both tun devices...
    assert _delta(before, after, "a", "tx_bytes") >= got
    assert _delta(before, after, "b", "rx_bytes") >= got
    # ...and across the underlay inside the SSH TCP connection (port 22)
    assert _delta(before, after, "b", "ssh_tcp_bytes_received") >= got
    assert _delta(before, after, "a", "ssh_tcp_bytes_acked") >= got
    log = (testbed.workdir / "sshd-b.sshd.log").read_text()
    assert "Accepted publickey for root" in log
    pids = [p for ps in ep.datapath_pids.values() for p in ps]
    assert len(pids) >= 3   # ssh, sshd listener, sshd session
    _assert_gone(testbed, pids)
    assert SYSTEM_SSHD_PID.exists() == sshd_pid_before


def test_ssh_forward_relays_iperf3(testbed: Testbed, root_unchanged: None) -> None:
    drv = tunnels.get("ssh-forward")
    ep = drv().up(testbed, drv.parse_params({}))
    assert ep.relay and ep.b4 == "127.0.0.1"
    under_before = netlink.link_stats(testbed.b.netns, testbed.b.underlay_if)
    got, before, after = _stream(testbed, drv, ep)
    under_after = netlink.link_stats(testbed.b.netns, testbed.b.underlay_if)
    # site a's loopback and site b's loopback are different namespaces: the only way between
    # them is the SSH connection on the underlay, whose TCP counters grew by the payload
    assert _delta(before, after, "b", "ssh_tcp_bytes_received") >= got
    assert _delta(before, after, "a", "ssh_tcp_bytes_acked") >= got
    assert under_after["rx_bytes"] - under_before["rx_bytes"] >= got
    pids = [p for ps in ep.datapath_pids.values() for p in ps]
    _assert_gone(testbed, pids)


@pytest.mark.parametrize("segments", [1, 2])
def test_srv6_both_families_df_mtu_and_seg6local_counters(testbed: Testbed, segments: int,
                                                           root_unchanged: None) -> None:
    skip_unless_here("srv6")
    drv = tunnels.get("srv6")
    ep = drv().up(testbed, drv.parse_params({"segments": segments}))
    assert ep.mtu == 1500 - 40 - 8 - 16 * segments
    a = testbed.a
    for addr, hdr in ((ep.b4, 28), (str(ep.b6), 48)):
        a.run(["ping", "-c", "1", "-W", "2", "-M", "do", "-s", str(ep.mtu - hdr), addr])
        too_big = a.run(["ping", "-c", "1", "-W", "1", "-M", "do", "-s",
                         str(ep.mtu - hdr + 1), addr], check=False)
        assert not too_big.ok
    for family, key in ((4, "end_dx4_bytes"), (6, "end_dt6_bytes")):
        got, before, after = _stream(testbed, drv, ep, family)
        # only SRv6 packets whose active SID is site b's End.DX4 / End.DT6 move these
        assert _delta(before, after, "b", key) >= got
        if segments > 1:   # and each went through the far site's End SID first
            assert _delta(before, after, "b", "end_bytes") >= got
        assert _delta(before, after, "a", key) > 0    # the ACKs came back the same way
        assert after["b"]["end_dx4_errors"] == after["b"]["end_dt6_errors"] == 0
    routes = [e for e in testbed.ledger.entries if e["kind"] == "command"]
    assert len(routes) == 2 * (2 + 4 + segments)   # 2 addrs + 4 routes + SIDs per site
    _assert_gone(testbed, [])
