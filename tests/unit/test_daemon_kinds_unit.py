"""Unit tests of the wireguard and ipsec kinds: parsers on captured real output, parameters,
MTU arithmetic, configuration rendering. No root needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import tunnels
from tunbench.errors import SpecError
from tunbench.tunnels import _spread, _xfrm
from tunbench.tunnels import _strongswan as ss
from tunbench.tunnels.ipsec import LIBIPSEC_MAX_MTU, esp_mtu
from tunbench.tunnels.wireguard import endpoint, parse_transfer


def test_parse_wg_transfer_captured(data_dir: Path) -> None:
    text = (data_dir / "daemons" / "wg-show-transfer.txt").read_text()
    got = parse_transfer(text)
    assert got == {"4nhNUJn2bU9FauM1j/LLqoy28iuOjReeqmSzFAPSLV0=": (879948, 34436740)}
    assert parse_transfer("") == {}


def test_parse_list_sas_captured(data_dir: Path) -> None:
    text = (data_dir / "daemons" / "swanctl-list-sas-libipsec.txt").read_text()
    sas = ss.parse_list_sas(text)
    assert list(sas) == ["tb0"]
    tb0 = sas["tb0"]
    assert tb0["state"] == "INSTALLED" and tb0["mode"] == "TUNNEL-in-UDP"
    assert tb0["ike_state"] == "ESTABLISHED" and tb0["proto"] == "ESP:AES_GCM_16-128"
    assert (tb0["in_bytes"], tb0["in_packets"]) == (0, 0)
    assert (tb0["out_bytes"], tb0["out_packets"]) == (46628394, 33312)


def test_parse_xfrm_state_stats() -> None:
    # shape of `ip -s xfrm state` (lifetime current lines), as printed by iproute2 6.1
    text = ("src 198.18.0.1 dst 198.18.0.2\n\tproto esp spi 0x00000101 reqid 100 mode tunnel\n"
            "\tlifetime current:\n\t  1000(bytes), 10(packets)\n"
            "src 198.18.0.2 dst 198.18.0.1\n\tlifetime current:\n\t  24(bytes), 1(packets)\n")
    assert _xfrm.parse_xfrm_state_stats(text) == {"sa_bytes": 1024, "sa_packets": 11}


@pytest.mark.parametrize(("mtu", "fam", "mode", "encap", "want"), [
    (1500, 4, "tunnel", True, 1438),     # 20 + 8 UDP + 8 ESP + 8 IV + 16 ICV + 2 = 62
    (1500, 4, "tunnel", False, 1446),    # without NAT-T: 54
    (1400, 4, "tunnel", True, 1338),     # verified by the netns test (underlay 1400)
    (1500, 6, "tunnel", True, 1418),
    (1501, 4, "tunnel", True, 1438),     # padding to 4 bytes: one more byte does not help
    (1500, 4, "transport", False, 1466),
])
def test_esp_mtu(mtu: int, fam: int, mode: str, encap: bool, want: int) -> None:
    got = esp_mtu(mtu, fam, mode, encap)
    assert got == want
    # the ciphertext (payload + 2 trailer bytes) is a multiple of 4 and fits exactly
    clear = 20 if mode == "transport" else 0
    assert (got - clear + 2) % 4 == 0


def test_overheads_and_mtus() -> None:
    wg = tunnels.get("wireguard")
    assert wg.overhead(wg.parse_params({}), 4) == 60
    assert wg.overhead(wg.parse_params({}), 6) == 80
    assert wg.tunnel_mtu(wg.parse_params({"underlay": 6}), 1500) == 1420
    ip = tunnels.get("ipsec")
    p = ip.parse_params({"impl": "libipsec"})
    assert ip.overhead(p, 4) == 62
    assert ip.tunnel_mtu(p, 1500) == LIBIPSEC_MAX_MTU     # charon reads 1400 bytes at most
    assert ip.tunnel_mtu(p, 1400) == 1338
    assert ip.tunnel_mtu(ip.parse_params({"impl": "kernel"}), 1500) == 1446


@pytest.mark.parametrize(("kind", "raw", "needle"), [
    ("ipsec", {"cipher": "des"}, "unknown cipher 'des'"),
    ("ipsec", {"impl": "libipsec", "mode": "transport"},
     "transport mode is not possible with libipsec"),
    ("ipsec", {"impl": "libipsec", "encap": False}, "always encapsulates ESP in UDP, port 4500"),
    ("ipsec", {"tunnels": 0}, "tunnels 0 out of range"),
    ("ipsec", {"auth": "certs"}, "auth 'certs' is not supported"),
    ("ipsec", {"impl": "xfrm", "encap": True}, "needs an IKE daemon"),
    ("ipsec", {"impl": "bogus"}, "parameter 'impl' must be one of '', 'libipsec', 'kernel'"),
    ("wireguard", {"impl": "bogus"}, "parameter 'impl' must be one of '', 'kernel', 'go'"),
    ("wireguard", {"impl": "rust"}, "parameter 'impl' must be one of '', 'kernel', 'go', got 'rust'"),
    ("wireguard", {"port": 0}, "port 0 out of range"),
    ("wireguard", {"colour": "red"}, "unknown parameter 'colour'"),
])
def test_bad_params_one_line(kind: str, raw: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as err:
        tunnels.get(kind).parse_params(raw)
    line = err.value.one_line()
    assert needle in line and "\n" not in line


def test_strongswan_conf_rendering(tmp_path: Path) -> None:
    vici = tmp_path / "vici0a.sock"
    conf = ss.strongswan_conf(ss.CharonConf("libipsec", vici, port=501, port_nat_t=4501,
                                            routing_table=221, routing_table_prio=32801))
    assert f"socket = unix://{vici}" in conf and "kernel-libipsec" in conf
    assert "port_nat_t = 4501" in conf and "routing_table = 221" in conf
    child = ss.ChildConf("tb0", "198.18.0.1", "198.18.0.2", 4500, "a", "b",
                         ["198.19.0.1/32"], ["198.19.0.2/32"], cipher="chacha20-poly1305",
                         if_id=3, psk_file="/x/psk0-a.conf")
    text = ss.swanctl_conf([child])
    assert "esp_proposals = chacha20poly1305" in text and "if_id_in = 3" in text
    assert "include /x/psk0-a.conf" in text and "secret" not in text
    assert text.count("{") == text.count("}")


def test_xfrm_lines_keep_keys_in_batch_file() -> None:
    ab = _xfrm.new_sa("198.18.0.1", "198.18.0.2", "aes-gcm-256", 100)
    ba = _xfrm.new_sa("198.18.0.2", "198.18.0.1", "aes-gcm-256", 101)
    assert len(ab.key_hex) == 72 and ab.key_hex != ba.key_hex
    line = _xfrm.state_line(ab, "aes-gcm-256", "tunnel", 1)
    assert "aead rfc4106(gcm(aes)) 0x" in line and line.endswith("128 if_id 1")
    pols = _xfrm.policy_lines(ab, ba, "tunnel", 1)
    assert len(pols) == 4 and all("if_id 1" in p for p in pols)
    assert "dir out tmpl src 198.18.0.1 dst 198.18.0.2" in pols[0]


def test_multipath_argv_and_endpoint() -> None:
    argv = _spread.multipath_argv("198.19.255.2", "198.19.255.1",
                                  [("198.19.0.2", "wg0"), ("198.19.1.2", "wg1")], 4)
    assert argv[:7] == ["ip", "-4", "route", "add", "198.19.255.2/32", "src", "198.19.255.1"]
    assert argv.count("nexthop") == 2
    assert endpoint("2001:2::2", 51820) == "[2001:2::2]:51820"
    assert endpoint("198.18.0.2", 1) == "198.18.0.2:1"


def test_ipsec_undo_argv_names_only_our_objects() -> None:
    """Teardown deletes exactly our SAs and policies (no `flush`): SAs by ID and reqid,
    charon's by our reqid, policies by selector, direction and our if_id."""
    r_ab, r_ba = _xfrm.static_reqids(0)
    assert (r_ab, r_ba) == (0x74620100, 0x74620101) and _xfrm.tb_id(1) == 0x74620001
    ab = _xfrm.new_sa("198.18.0.1", "198.18.0.2", "aes-gcm-128", r_ab)
    assert _xfrm.delete_sa_argv(ab) == [
        "ip", "xfrm", "state", "deleteall", "src", "198.18.0.1", "dst", "198.18.0.2",
        "proto", "esp", "spi", f"0x{ab.spi:08x}", "reqid", str(0x74620100)]
    assert _xfrm.delete_reqid_argv(_xfrm.tb_id(2)) == [
        "ip", "xfrm", "state", "deleteall", "reqid", "1952579586"]
    pols = _xfrm.static_policies(ab, "tunnel", _xfrm.tb_id(1))
    assert [(p.src, p.dst, p.dir) for p in pols] == [
        ("0.0.0.0/0", "0.0.0.0/0", "out"), ("0.0.0.0/0", "0.0.0.0/0", "in"),
        ("::/0", "::/0", "out"), ("::/0", "::/0", "in")]
    assert _xfrm.delete_policy_argv(pols[0]) == [
        "ip", "xfrm", "policy", "delete", "src", "0.0.0.0/0", "dst", "0.0.0.0/0", "dir", "out",
        "if_id", "1952579585"]
    # the static lines add exactly the policies that are deleted
    lines = _xfrm.policy_lines(ab, ab, "tunnel", _xfrm.tb_id(1))
    assert [ln.split(" tmpl")[0] for ln in lines] == [
        f"xfrm policy add src {p.src} dst {p.dst} dir {p.dir}" for p in pols]
    transport = _xfrm.static_policies(ab, "transport", 0)
    assert [(p.src, p.dst, p.dir) for p in transport] == [
        ("198.18.0.1/32", "198.18.0.2/32", "out"), ("198.18.0.2/32", "198.18.0.1/32", "in")]
    assert "if_id" not in _xfrm.delete_policy_argv(transport[0])
    charon = _xfrm.charon_policies("tunnel", "198.18.0.1", "198.18.0.2", _xfrm.tb_id(1))
    assert {p.dir for p in charon} == {"out", "in", "fwd"} and len(charon) == 6
    assert all(p.if_id == 0x74620001 for p in charon)
    every = [_xfrm.delete_sa_argv(ab), _xfrm.delete_reqid_argv(1)] + [
        _xfrm.delete_policy_argv(p) for p in charon + transport]
    assert not [a for a in every if "flush" in a]


def test_swanctl_child_carries_our_reqid() -> None:
    child = ss.ChildConf("tb0", "198.18.0.1", "198.18.0.2", 500, "a", "b", ["0.0.0.0/0"],
                         ["0.0.0.0/0"], if_id=_xfrm.tb_id(1), reqid=_xfrm.tb_id(1))
    text = ss.swanctl_conf([child])
    assert "reqid = 1952579585" in text and "if_id_out = 1952579585" in text
    assert "reqid" not in ss.swanctl_conf([ss.ChildConf("tb0", "x", "y", 500, "a", "b",
                                                        ["dynamic"], ["dynamic"])])
