"""On this host: kernel kinds it lacks are refused with the exact option before any change;
the underlay capture used by the VM lab tests works on a real VXLAN tunnel here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from testbeds import until

from tunbench import pcap, tunnels
from tunbench.capabilities import kernel_config
from tunbench.testbed.base import Testbed

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
OPTION = {"geneve": "CONFIG_GENEVE", "gre": "CONFIG_NET_IPGRE", "gretap": "CONFIG_NET_IPGRE",
          "ipip": "CONFIG_NET_IPIP", "sit": "CONFIG_IPV6_SIT", "l2tp": "CONFIG_L2TP_ETH",
          "netem": "CONFIG_NET_SCH_NETEM"}


def lacks(option: str) -> bool:
    conf = kernel_config()
    return conf is not None and conf.get(option) not in ("y", "m")


@pytest.mark.parametrize("what", sorted(OPTION))
def test_run_refuses_before_any_change(what: str, tmp_path: Path,
                                       root_unchanged: None) -> None:
    if not lacks(OPTION[what]):
        pytest.skip(f"this kernel has {OPTION[what]} (or its configuration is unreadable)")
    args = (["--tunnels", "native", "--delay", "20ms"] if what == "netem" else
            ["--tunnels", what])
    out = tmp_path / "never"
    r = subprocess.run(TB + ["run", *args, "--duration", "1", "--repeats", "1", "--out",
                             str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines          # exactly one reason, on one line
    assert lines[0].startswith("tunbench: cannot run this experiment here: ")
    assert f"kernel {OPTION[what]}" in lines[0] or OPTION[what] in lines[0], lines[0]
    # refused in preflight: not even the result folder was made (other engineers' runs
    # create and delete namespaces on this machine all the time, so those are not compared)
    assert not out.exists()


def test_list_json_says_why(tmp_path: Path) -> None:
    import json
    r = subprocess.run(TB + ["list", "--json"], capture_output=True, text=True, timeout=60)
    kinds = json.loads(r.stdout)["tunnels"]
    for kind in ("geneve", "gre", "gretap", "ipip", "sit", "l2tp"):
        if lacks(OPTION[kind]):
            assert kinds[kind]["available"] is False
            assert OPTION[kind] in kinds[kind]["reasons"][0]


def test_capture_sees_vxlan_encapsulation_and_exact_overhead(testbed: Testbed) -> None:
    """The proof method of the VM lab tests, on a kind this host has."""
    drv = tunnels.get("vxlan")
    ep = drv().up(testbed, drv.parse_params({}))
    testbed.a.run(["ping", "-c", "1", "-W", "2", ep.b4])
    with pcap.capture(testbed, testbed.b, testbed.b.underlay_if) as cap:
        testbed.a.run(["ping", "-c", "3", "-i", "0.1", "-M", "do", "-s", str(ep.mtu - 28),
                       ep.b4])
        # a starved tcpdump writes late: wait for the frames while it still runs
        until("3 VXLAN requests in b's capture", lambda: len([
            p for p in pcap.parse_pcap(cap.path.read_bytes()) if p.udp_to(4789)
            and p.dst == testbed.b.underlay4]) >= 3 if cap.path.exists() else False)
    vx = [p for p in cap.packets if p.udp_to(4789) and p.dst == testbed.b.underlay4]
    assert len(vx) >= 3
    assert max(p.length for p in vx) == ep.mtu + ep.overhead == 1500
    assert not [p for p in cap.packets if p.src.startswith("198.19.")]
    assert not cap.path.exists() or cap.path.parent == testbed.workdir


@pytest.mark.parametrize("axis", [["--rtts", "0ms,20ms,80ms"], ["--losses", "0%,0.1%"],
                                  ["--rtts", "0ms,20ms", "--losses", "0%,0.1%"]])
def test_rtt_loss_axes_refused_at_the_spec(axis: list[str], tmp_path: Path,
                                           root_unchanged: None) -> None:
    """An RTT or loss axis needs netem for its values above 0: refused at the spec (exit 2,
    as the chain's WAN delay), one line naming the option and where to run it instead."""
    if not lacks("CONFIG_NET_SCH_NETEM"):
        pytest.skip("this kernel has CONFIG_NET_SCH_NETEM (or its configuration is unreadable)")
    out = tmp_path / "never"
    r = subprocess.run(TB + ["run", "--tunnels", "native,vxlan", *axis, "--duration", "1",
                             "--repeats", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs netem, which this kernel lacks (CONFIG_NET_SCH_NETEM): run this campaign " \
        "in the VM lab (docs/vmlab.md) or between real hosts" in lines[0], lines[0]
    assert lines[0].startswith("tunbench: " + "/".join(a for a in axis if a.startswith("--")))
    assert not out.exists()
