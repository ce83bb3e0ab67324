"""`tunbench list`: TOML that pastes into an experiment file, one kind at a time, versioned
JSON; tool versions read from captured real output (tests/data/versions)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tomllib
from pathlib import Path

import pytest

import cli_inproc
from tunbench import proc, spec, tunnels, workloads
from tunbench.results import envinfo

VERSIONS = Path(__file__).parent.parent / "data" / "versions"


def tb(*args: str) -> subprocess.CompletedProcess[str]:
    """`tunbench ARGS` in this process (cli_inproc): what it prints and returns."""
    return cli_inproc.tunbench(*args)


def test_list_params_is_toml_an_experiment_file_accepts() -> None:
    r = tb("list", "--params")
    assert r.returncode == 0, r.stderr
    doc = tomllib.loads(r.stdout)
    assert {t["kind"] for t in doc["tunnel"]} == set(tunnels.registry())
    assert {w["name"] for w in doc["workload"]} == set(workloads.registry())
    # every default round-trips: the pasted tables build an experiment as they are
    exp = spec.build(doc, "list --params", available=set(tunnels.registry()))
    for t in exp.tunnels:
        assert t.params == tunnels.get(t.kind).Params(), t.kind
    for w in exp.workloads:
        assert w.params == workloads.get(w.name).Params(), w.name


def test_list_params_of_one_kind_with_descriptions() -> None:
    r = tb("list", "--params", "stream")
    assert r.returncode == 0
    doc = tomllib.loads(r.stdout)
    assert doc == {"workload": [{"name": "stream",
                                 **workloads.get("stream").Params().to_dict()}]}
    for f in dataclasses.fields(workloads.get("stream").Params):
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"{f.name} = "))
        assert line.endswith("# " + f.metadata["help"]), line
    vx = tomllib.loads(tb("list", "--params", "vxlan").stdout)
    assert vx["tunnel"][0]["kind"] == "vxlan" and vx["tunnel"][0]["vni"] == 42


def test_every_workload_parameter_has_a_description() -> None:
    for name, wl in workloads.registry().items():
        for f in dataclasses.fields(wl.Params):
            assert f.metadata.get("help"), f"{name}.{f.name}"


def test_list_one_kind_and_unknown_kind() -> None:
    r = tb("list", "vxlan")
    assert r.returncode == 0 and "vxlan" in r.stdout and "wireguard" not in r.stdout
    bad = tb("list", "vxlna")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown tunnel kind or workload 'vxlna'" in bad.stderr


def test_list_json_is_versioned_and_says_reasons_like_doctor() -> None:
    doc = json.loads(tb("list", "--json").stdout)
    assert doc["format"] == "tunbench-list" and doc["format_version"] == 1
    for section in ("tunnels", "workloads"):
        for name, e in doc[section].items():
            assert set(e) >= {"available", "reasons", "summary", "params"}, name
            assert e["available"] == (not e["reasons"])
    assert doc["workloads"]["stream"]["params"]["streams"]["help"]
    one = json.loads(tb("list", "--json", "ping").stdout)
    assert list(one["workloads"]) == ["ping"] and one["tunnels"] == {}


def test_version_line_on_captured_output() -> None:
    swanctl = (VERSIONS / "swanctl-version.txt").read_text()
    assert swanctl.splitlines()[0].startswith("plugin '")   # what used to be recorded
    assert envinfo.version_line(swanctl) == "strongSwan 5.9.8 swanctl"
    assert envinfo.version_line((VERSIONS / "charon-version.txt").read_text()) == \
        "Linux strongSwan 5.9.8"
    assert envinfo.version_line((VERSIONS / "iperf3-version.txt").read_text()).startswith(
        "iperf 3.12")
    assert envinfo.version_line((VERSIONS / "ssh-V.txt").read_text()).startswith("OpenSSH_")
    assert envinfo.version_line("Error: connecting to 'default' URI failed") is None


def test_swanctl_version_read_here() -> None:
    if not proc.which("swanctl"):
        pytest.skip("swanctl is not installed (strongswan-swanctl)")
    v = envinfo.tool_versions(["swanctl"])["swanctl"]
    assert v and "strongSwan" in v and "plugin" not in v


def test_toml_strings_round_trip_with_control_characters() -> None:
    """DEL (0x7F) must be escaped in a TOML basic string; JSON's escapes alone leave it raw."""
    import tomllib

    from tunbench import listing
    for text in ("a\x7fb", "tab\tnl\nquote\"back\\", "\x00\x1f", "µs ✓"):
        doc = f"k = {listing.toml_value(text)}\nt = {listing.toml_value({text: [text]})}\n"
        assert tomllib.loads(doc) == {"k": text, "t": {text: [text]}}
