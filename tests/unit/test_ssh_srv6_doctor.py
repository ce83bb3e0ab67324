"""SSH / SRv6 parsers on captured real output, parameter validation, doctor helpers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tunbench import doctor, tunnels
from tunbench.errors import SpecError
from tunbench.tunnels import _ssh
from tunbench.tunnels.base import KernelOption, Needs, TunnelDriver, TunnelParams
from tunbench.tunnels.srv6 import parse_seg6local_counters
from tunbench.tunnels.ssh_forward import listening


def test_seg6local_counters_parsed(data_dir: Path) -> None:
    c = parse_seg6local_counters((data_dir / "ip/route-s-6-seg6local-3segs.txt").read_text())
    assert set(c) == {"2001:2:0:f2::d4", "2001:2:0:f2::d6", "2001:2:0:f2::e1",
                      "2001:2:0:f2::e2"}   # the seg6 encap route has no counters
    assert c["2001:2:0:f2::d4"] == {"action": "End.DX4", "packets": 1, "bytes": 1500,
                                    "errors": 0}
    assert c["2001:2:0:f2::d6"]["action"] == "End.DT6"
    assert c["2001:2:0:f2::e1"] == {"action": "End", "packets": 2, "bytes": 1744, "errors": 0}


def test_ss_tcp_info_parsed(data_dir: Path) -> None:
    c = _ssh.parse_ss_tcp_info((data_dir / "ss/tin-established-dport22.txt").read_text())
    assert c["bytes_acked"] == 79642430
    assert c["bytes_received"] == 2633545
    assert c["bytes_sent"] == 79649409   # not confused with bytes_retrans
    assert c["segs_out"] == 55583 and c["segs_in"] == 8499


def test_ss_listening_parsed(data_dir: Path) -> None:
    text = (data_dir / "ss/ltn-forward-5201.txt").read_text()
    assert listening(text) == {"127.0.0.1:5201", "[::1]:5201"}


def test_ssh_framing_and_mtu() -> None:
    assert _ssh.framing_overhead("aes128-gcm@openssh.com") == 53
    assert _ssh.framing_overhead("chacha20-poly1305@openssh.com") == 45
    drv = tunnels.get("ssh-tun")
    # 20 IPv4 + 32 TCP with timestamps + framing
    assert drv.tunnel_mtu(drv.parse_params({}), 1500) == 1500 - 20 - 32 - 53


@pytest.mark.parametrize("segments,overhead", [(1, 64), (2, 80), (5, 128)])
def test_srv6_overhead(segments: int, overhead: int) -> None:
    drv = tunnels.get("srv6")
    assert drv.overhead(drv.parse_params({"segments": segments})) == overhead
    assert drv.family(drv.parse_params({})) == 6


@pytest.mark.parametrize("kind,raw,needle", [
    ("ssh-tun", {"cipher": "rot13"}, "unknown cipher 'rot13'"),
    ("ssh-forward", {"cipher": "des"}, "unknown cipher 'des'"),
    ("srv6", {"segments": 0}, "segments 0 out of range"),
    ("ssh-forward", {"ports": 0}, "ports 0 out of range"),
    ("ssh-forward", {"forward_port": 60000}, "sockperf's port 66000 is out of range"),
])
def test_bad_params_one_clear_line(kind: str, raw: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        tunnels.get(kind).parse_params(raw)
    line = exc.value.one_line()
    assert needle in line and kind in line
    assert "\n" not in line


def test_ssh_forward_forwards_the_workloads_ports() -> None:
    """The stream ports from forward_port and sockperf's (ports.py), unless turned off."""
    drv = tunnels.get("ssh-forward")
    assert drv.parse_params({}).forwarded() == [5201, 5202, 5203, 5204, 11201]
    assert drv.parse_params({"forward_port": 7000, "ports": 1}).forwarded() == [7000, 13000]
    assert drv.parse_params({"sockperf": False, "ports": 2}).forwarded() == [5201, 5202]
    assert drv.parse_params({"forward_port": 60000, "sockperf": False}).forwarded()[0] == 60000


def test_valid_ciphers_accepted() -> None:
    for c in ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
              "chacha20-poly1305@openssh.com"):
        if c in _ssh.supported_ciphers():
            assert tunnels.get("ssh-tun").parse_params({"cipher": c}).cipher == c


def test_implementations_from_literal_param() -> None:
    @dataclass(frozen=True)
    class P(TunnelParams):
        impl: Literal["auto", "kernel", "userspace"] = "auto"

    @dataclass(frozen=True)
    class Q(TunnelParams):
        datapath: Literal["", "netdev"] | None = None

    class D(TunnelDriver[P]):
        kind, summary, Params, impl_param = "d", "test", P, "impl"

        @classmethod
        def overhead(cls, params: P, family: int = 4) -> int:
            return 0

        def up(self, tb: Any, params: P) -> Any:
            raise NotImplementedError

    class E(D):
        Params, impl_param = Q, "datapath"

    assert D.implementations() == ("kernel", "userspace")
    assert E.implementations() == ("netdev",)
    assert D.display(P(impl="kernel")) == "d (kernel)"
    # automatic: the first implementation whose declared needs this host meets
    D.needs = {"kernel": Needs(kernel=(KernelOption("CONFIG_TB_NO_SUCH_OPTION", None),))}
    assert D.display(P(), "mine") == "mine (userspace)"
    D.needs = {}
    assert D.resolve_impl(P()) == "kernel"
    assert tunnels.get("wireguard").implementations() == ("kernel", "go")
    assert tunnels.get("ipsec").implementations() == ("libipsec", "kernel", "xfrm")
    assert tunnels.get("ovs-vxlan").implementations() == ("netdev", "system")


def test_doctor_lists_every_registered_kind() -> None:
    kinds = doctor.kinds_report()
    assert set(kinds) == set(tunnels.registry())
    for entry in kinds.values():
        assert isinstance(entry["available"], bool)
        assert all(isinstance(r, str) for r in entry["reasons"])
