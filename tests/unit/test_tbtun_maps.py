"""tbtun's map layouts (tbtun/maps.py) against the compiled object's BTF and bpf/tbtun.h."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tunbench.errors import SpecError
from tunbench.tbtun import loader, maps, rules

HEADER = Path(__file__).resolve().parents[2] / "bpf" / "tbtun.h"


def _btf() -> dict[str, dict[str, Any]]:
    obj = loader.object_path()
    if not obj.is_file():
        pytest.skip(f"{obj} is not built (run `make bpf`)")
    if not shutil.which("bpftool"):
        pytest.skip("bpftool is not installed (deps/apt-ebpf.txt)")
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    return {t["name"]: t for t in json.loads(out)["types"]
            if t["kind"] == "STRUCT" and t.get("name", "").startswith("tb_")}


def _offsets(t: dict[str, Any]) -> dict[str, int]:
    return {m["name"]: m["bits_offset"] // 8 for m in t["members"]}


def test_packed_layouts_match_the_compiled_structs() -> None:
    btf = _btf()
    rule = maps.Rule("198.19.0.0/24", "198.18.0.2", 7, "geneve", 0, "02:00:00:00:00:09", 5)
    assert len(maps.pack_rule(rule)) == btf["tb_rule"]["size"]
    assert len(maps.pack_key("198.19.0.0/24")) == btf["tb_key4"]["size"]
    assert len(maps.pack_key("2001:2::/64")) == btf["tb_key6"]["size"]
    cfg = maps.pack_config(local4="198.18.0.1", realm=116, mtu=1500, vxlan_port=4789,
                           geneve_port=6081)
    assert len(cfg) == btf["tb_config"]["size"]
    assert btf["tb_counter"]["size"] == 16
    off = _offsets(btf["tb_rule"])
    raw = maps.pack_rule(rule)
    assert raw[off["port"]:off["port"] + 2] == (6081).to_bytes(2, "big")
    assert raw[off["remote"]:off["remote"] + 4] == bytes([198, 18, 0, 2])
    assert raw[off["inner_mac"]:off["inner_mac"] + 6] == bytes.fromhex("020000000009")
    coff = _offsets(btf["tb_config"])
    assert cfg[coff["local4"]:coff["local4"] + 4] == bytes([198, 18, 0, 1])
    assert cfg[coff["vxlan_port"]:coff["vxlan_port"] + 2] == (4789).to_bytes(2, "big")


def test_header_constants_match() -> None:
    text = HEADER.read_text()
    assert f"#define TB_LAYOUT_VERSION {maps.LAYOUT_VERSION}" in text
    assert f"#define TB_MAX_RULES {maps.MAX_RULES}" in text
    stats = re.findall(r"TB_STAT_(\w+)", text.split("enum tb_stat")[1])
    assert [s.lower() for s in stats if s != "MAX"] == [s.replace("_error", "_err")
                                                         for s in maps.STATS]
    for name, value in maps.ENCAPS.items():
        assert f"TB_ENCAP_{name.upper()} = {value}" in text


def test_rule_round_trip_and_problems() -> None:
    rule = maps.Rule("198.19.4.0/22", "198.18.0.9", 4242, "vxlan", 0, "02:74:62:00:00:01", 17)
    back = maps.unpack_rule(rule.prefix, maps.pack_rule(rule))
    assert back == maps.Rule(rule.prefix, rule.remote, 4242, "vxlan", 4789, rule.inner_mac, 17)
    assert maps.unpack_key(maps.pack_key("2001:2:0:1::/64")) == "2001:2:0:1::/64"
    bad = maps.Rule("198.19.4.1/22", "2001::1", 0, "vxlan", 70000, "zz", 9999)
    text = "; ".join(bad.problems())
    for words in ("host bits", "only IPv4", "vni 0", "port 70000", "inner MAC", "rule id"):
        assert words in text, text


def test_percpu_counters_formatted_or_raw() -> None:
    formatted = [{"cpu": 0, "value": {"packets": 2, "bytes": 196}},
                 {"cpu": 1, "value": {"packets": 1, "bytes": 98}}]
    raw = [{"cpu": 0, "value": ["0x03"] + ["0x00"] * 7 + ["0x10", "0x01"] + ["0x00"] * 6}]
    assert maps.sum_percpu(formatted) == (3, 294)
    assert maps.sum_percpu(raw) == (3, 272)


def test_site_argument_errors_are_one_line() -> None:
    with pytest.raises(SpecError) as e:
        rules.site_path("nonsense")
    assert "<run>/<site>" in e.value.one_line() and "\n" not in e.value.one_line()
    with pytest.raises(SpecError) as e:
        rules.site_path("00000/a")
    assert "not a running tbtun site" in e.value.message


def test_kernel_version_gate() -> None:
    """6.1 (Debian 12, proven in the VM lab) loads; tc decap carries IPv6 inside from 6.3."""
    assert loader.kernel_too_old("5.15.0-91-generic") is not None
    assert loader.kernel_too_old("6.1.0-18-amd64") is None
    assert loader.kernel_too_old("6.3.0") is None
    assert loader.kernel_too_old("6.18.44-fc") is None
    assert "decap=xdp carries both" in loader.tc_decap_ipv6("6.1.0-18-amd64")
    assert loader.tc_decap_ipv6("6.3.0") == ""
    assert loader.tc_decap_ipv6("6.18.44-fc-v445") == ""
