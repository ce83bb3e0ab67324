"""Kernel tunnel kinds on the host: parameters, overheads, exact missing kernel options,
netem values, and the pcap / ping parsers on captured real output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import spec, tunnels
from tunbench.capabilities import kernel_config
from tunbench.errors import SpecError
from tunbench.metrics.ping import parse_ping
from tunbench.pcap import parse_pcap
from tunbench.testbed.netem import Netem, qdisc_argvs

KERNEL_KINDS = ("geneve", "gre", "gretap", "ipip", "sit", "l2tp")


@pytest.mark.parametrize("kind, raw, family, overhead", [
    ("geneve", {}, 4, 50),
    ("geneve", {"underlay": 6}, 6, 70),
    ("gre", {}, 4, 24),
    ("gre", {"key": 1}, 4, 28),
    ("gretap", {}, 4, 38),
    ("gretap", {"key": 0}, 4, 42),
    ("ipip", {}, 4, 20),
    ("sit", {}, 4, 20),
    ("l2tp", {}, 4, 50),                                   # 20 + 8 + 4 + 4 + 14
    ("l2tp", {"encap": "ip"}, 4, 38),                      # 20 + 4 + 14
    ("l2tp", {"cookie": 8, "l2spec": "default"}, 4, 62),   # + 8 + 4
    ("l2tp", {"encap": "ip", "cookie": 4}, 4, 42),
])
def test_overhead_and_mtu(kind: str, raw: dict, family: int, overhead: int) -> None:
    drv = tunnels.get(kind)
    params = drv.parse_params(raw)
    assert drv.family(params) == family
    assert drv.overhead(params, family) == overhead
    assert drv.tunnel_mtu(params, 1500) == 1500 - overhead


def test_inner_families() -> None:
    assert tunnels.get("sit").inner_families == (6,)
    assert tunnels.get("ipip").inner_families == (4,)
    assert tunnels.get("geneve").inner_families == (4, 6)


@pytest.mark.parametrize("tunnel, needle", [
    ({"kind": "geneve", "vni": 2**24}, "tunnel geneve: vni 16777216 out of range (0..16777215)"),
    ({"kind": "geneve", "vni": -1}, "vni -1 out of range"),
    ({"kind": "geneve", "underlay": 5}, "parameter 'underlay' must be one of 4, 6, got 5"),
    ({"kind": "gre", "key": "abc"}, "parameter 'key' must be int or NoneType, got 'abc'"),
    ({"kind": "gretap", "key": 2**32}, "key 4294967296 out of range (0..4294967295)"),
    ({"kind": "l2tp", "encap": "gre"}, "parameter 'encap' must be one of 'udp', 'ip', got 'gre'"),
    ({"kind": "l2tp", "cookie": 3}, "parameter 'cookie' must be one of 0, 4, 8, got 3"),
    ({"kind": "l2tp", "l2spec": "x"}, "parameter 'l2spec' must be one of 'none', 'default'"),
    ({"kind": "l2tp", "session_id": 0}, "session_id 0 out of range (1..4294967295)"),
    ({"kind": "ipip", "key": 1}, "unknown parameter 'key'"),
])
def test_bad_parameters_one_line_each(tunnel: dict, needle: str) -> None:
    with pytest.raises(SpecError) as e:
        spec.build({"tunnel": [tunnel]})
    assert needle in e.value.message
    assert "\n" not in e.value.message


EXPECTED_OPTION = {"geneve": "CONFIG_GENEVE", "gre": "CONFIG_NET_IPGRE",
                   "gretap": "CONFIG_NET_IPGRE", "ipip": "CONFIG_NET_IPIP",
                   "sit": "CONFIG_IPV6_SIT", "l2tp": "CONFIG_L2TP_ETH"}


@pytest.mark.parametrize("kind", KERNEL_KINDS)
def test_unavailable_here_with_the_exact_option(kind: str) -> None:
    conf = kernel_config()
    if conf is None:
        pytest.skip("the kernel configuration is not readable here")
    option = EXPECTED_OPTION[kind]
    if conf.get(option) in ("y", "m"):
        pytest.skip(f"this kernel has {option}: {kind} is available here")
    drv = tunnels.get(kind)
    missing = drv.requirements(drv.Params())
    assert len(missing) == 1, missing
    line = missing[0].one_line()
    assert line.startswith("kernel ") and option in line, line
    assert "VM lab" in line


def test_l2tp_encap_ip_also_needs_l2tp_ip() -> None:
    conf = kernel_config()
    if conf is None or conf.get("CONFIG_L2TP_IP") in ("y", "m"):
        pytest.skip("kernel configuration unreadable or it has CONFIG_L2TP_IP")
    drv = tunnels.get("l2tp")
    (m,) = drv.requirements(drv.parse_params({"encap": "ip"}))
    assert "CONFIG_L2TP_IP" in m.what


# ---- netem ---------------------------------------------------------------------------------

@pytest.mark.parametrize("exp, needle", [
    ({"delay": "25"}, "experiment.delay '25' is not a time like 25ms"),
    ({"delay": "fast"}, "experiment.delay 'fast'"),
    ({"delay": "20s"}, "experiment.delay 20s is longer than 10s"),
    ({"delay": "5ms", "jitter": "1m"}, "experiment.jitter '1m' is not a time"),
    ({"jitter": "5ms"}, "experiment.jitter needs a delay"),
    ({"loss": "0.1"}, "experiment.loss '0.1' is not a percentage"),
    ({"loss": "101%"}, "experiment.loss '101%'"),
    ({"netem_rate": "100mb/s"}, "experiment.netem_rate '100mb/s' is not a rate above 0 like 100mbit"),
])
def test_netem_values_one_line_each(exp: dict, needle: str) -> None:
    with pytest.raises(SpecError) as e:
        spec.build({"experiment": exp})
    assert needle in e.value.message and "\n" not in e.value.message


def test_netem_spec_and_qdiscs() -> None:
    exp = spec.build({"experiment": {"delay": "25ms", "jitter": "5ms", "loss": "0.1%",
                                     "netem_rate": "100mbit", "rate": "500mbit"}})
    assert exp.netem == Netem("25ms", "5ms", "0.1%", "100mbit")
    assert exp.to_dict()["delay"] == "25ms"
    argvs = qdisc_argvs("tbx", exp.netem, exp.rate, ["tbf", "rate", "500mbit"])
    assert argvs[0] == ["tc", "qdisc", "replace", "dev", "tbx", "root", "handle", "1:", "netem",
                        "limit", "10000", "delay", "25ms", "5ms", "loss", "0.1%",
                        "rate", "100mbit"]
    assert argvs[1][:8] == ["tc", "qdisc", "replace", "dev", "tbx", "parent", "1:1",
                            "handle"]
    assert spec.build({}).netem is None
    assert qdisc_argvs("tbx", None, None, []) == []


def test_cli_flags_reach_the_spec() -> None:
    from tunbench import cli
    args = cli.build_parser().parse_args(["run", "--tunnels", "native", "--delay", "25ms",
                                          "--jitter", "5ms", "--loss", "0.1%",
                                          "--netem-rate", "100mbit"])
    exp = cli.spec_from_args(args)
    assert exp.netem == Netem("25ms", "5ms", "0.1%", "100mbit")
    rebuilt = spec.build(cli._spec_dict(exp.to_dict()), exp.source)
    assert rebuilt.to_dict() == exp.to_dict()   # --resume sees the same experiment


# ---- parsers on captured real output -------------------------------------------------------

def test_pcap_vxlan_capture(data_dir: Path) -> None:
    pkts = parse_pcap((data_dir / "pcap" / "vxlan-ping.pcap").read_bytes())
    vx = [p for p in pkts if p.udp_to(4789)]
    assert len(vx) >= 10
    # DF pings at the tunnel MTU (1450): outer IPv4 packets of exactly 1500 bytes, whole
    assert max(p.length for p in vx) == 1500
    assert {p.src for p in vx} == {"198.18.0.1", "198.18.0.2"}
    assert not any(p.fragment for p in pkts)
    assert any(p.version == 6 for p in pkts)   # the underlay's own IPv6 chatter (ND, MLD)


def test_pcap_rejects_other_formats() -> None:
    with pytest.raises(ValueError, match="not a classic pcap"):
        parse_pcap(b"\x0a\x0d\x0d\x0a" + b"\0" * 40)
    assert parse_pcap(b"") == []


def test_ping_parser(data_dir: Path) -> None:
    ok = parse_ping((data_dir / "ping" / "ok.txt").read_text())
    assert ok["transmitted"] == 5 and ok["received"] == 5 and ok["loss_pct"] == 0
    assert ok["rtt_min_ms"] == 0.044 and ok["rtt_avg_ms"] == 0.053
    none = parse_ping((data_dir / "ping" / "none.txt").read_text())
    assert none["received"] == 0 and none["loss_pct"] == 100 and none["rtt_avg_ms"] is None
