"""What is derived from the drivers' declarations: install hints, tool versions, doctor's
kernel options and tools, the VM lab's modules and guest packages; and a duplicate kind is an
error at discovery."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from tunbench import capabilities, doctor, proc, tunnels
from tunbench.errors import SpecError
from tunbench.registry import discover
from tunbench.results import envinfo
from tunbench.vmlab import image, qemu


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(text)


def test_duplicate_kind_is_an_error_naming_both_modules(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = "class D:\n    kind = 'vxlan'\nDRIVER = D\n"
    _package(tmp_path, "tbdup", {"vxlan": driver, "vxlan_copy": driver})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SpecError) as exc:
        discover("tbdup", [str(tmp_path / "tbdup")], "DRIVER", "kind")
    line = exc.value.one_line()
    assert "tbdup.vxlan_copy registers kind 'vxlan'" in line and "tbdup.vxlan already" in line
    assert "give tbdup.vxlan_copy its own kind" in line
    for mod in [m for m in sys.modules if m.startswith("tbdup")]:
        monkeypatch.delitem(sys.modules, mod)


def test_one_module_reexporting_a_driver_is_not_a_duplicate(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "tbsame", {"a": "class D:\n    kind = 'x'\nDRIVER = D\n",
                                  "b": "from .a import D as DRIVER\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover("tbsame", [str(tmp_path / "tbsame")], "DRIVER", "kind")
    assert list(found) == ["x"]
    for mod in [m for m in sys.modules if m.startswith("tbsame")]:
        monkeypatch.delitem(sys.modules, mod)


def test_install_hints_come_from_the_declarations() -> None:
    assert proc.package_for("wg") == "wireguard-tools"
    assert proc.package_for("wireguard-go") == "wireguard-go"
    assert proc.package_for("charon") == "strongswan-charon"
    assert proc.package_for("sshd") == "openssh-server"
    assert proc.package_for("ovs-vswitchd") == "openvswitch-switch"
    assert proc.package_for("iperf3") == "iperf3"            # the base table
    assert proc.package_for("no-such-tool") == "no-such-tool"
    m = capabilities.tool_missing("tb-absent-tool-x")
    assert m is not None and m.fix == "apt-get install tb-absent-tool-x"
    for name, pkg in tunnels.tool_packages().items():
        assert pkg, name


def test_tool_versions_cover_every_declared_tool() -> None:
    argvs = envinfo.version_argvs()
    for name, tool in tunnels.declared_tools().items():
        if tool.version_argv:
            assert argvs[name] == [name, *tool.version_argv]
        else:   # no version option (ssh-keygen): never asked, only found
            assert argvs[name] == []
            found = envinfo.tool_versions([name])[name]
            assert found is None or found.startswith("installed (")
    assert set(envinfo.VERSION_ARGS) <= set(argvs)
    assert set(tunnels.declared_tools()) <= set(doctor.doctor_tools())


def test_version_line_skips_warnings() -> None:
    text = ("plugin 'test-vectors': failed to load - test_vectors_plugin_create not found\n"
            "strongSwan swanctl 5.9.8\n")
    assert envinfo.version_line(text) == "strongSwan swanctl 5.9.8"
    assert envinfo.version_line("") is None


def test_doctor_kernel_options_include_every_declared_one() -> None:
    opts = doctor.kernel_options()
    for kind, drv in tunnels.registry().items():
        for k in drv.declared().kernel:
            assert k.option in opts, (kind, k.option)
    assert {"CONFIG_WIREGUARD", "CONFIG_INET_ESP", "CONFIG_OPENVSWITCH_VXLAN",
            "CONFIG_NET_NS", "CONFIG_NET_SCH_NETEM"} <= set(opts)


def test_vmlab_modules_and_guest_packages_are_derived() -> None:
    mods = set(qemu.DEFAULT_MODULES)
    for drv in tunnels.registry().values():
        assert {k.module for k in drv.declared().kernel if k.module} <= mods, drv.kind
    # the modules the lab loaded before they were derived are all still loaded
    assert {"vxlan", "geneve", "ip_gre", "ipip", "sit", "l2tp_eth", "l2tp_netlink", "wireguard",
            "esp4", "esp6", "xfrm_interface", "gcm", "chacha20poly1305", "seqiv", "echainiv",
            "openvswitch", "vport_vxlan", "vport_geneve", "vport_gre", "veth", "tun",
            "sch_netem"} <= mods
    pkgs = set(image.GUEST_PACKAGES)
    assert {"wireguard-tools", "strongswan-charon", "strongswan-swanctl",
            "libstrongswan-standard-plugins", "openvswitch-switch"} <= pkgs
    # userspace-only implementations are not the lab's business; sshd is there for the
    # two-guest tier, whose sites tunbench reaches over SSH (vmlab/sites.py)
    assert "wireguard-go" not in pkgs and "openssh-server" in pkgs


def test_what_a_kind_carries_and_runs_in_is_recorded_from_its_driver() -> None:
    """Every case's tunnel record says what the kind carries and whether its datapath runs in
    the kernel (`tunbench advise --carries`, `--kernel-only`), from the driver's `carries` and
    `userspace` declarations at write time; wireguard's two implementations differ."""
    from tunbench import spec
    from tunbench.plan import plan
    from tunbench.runner import tunnel_identity
    exp = spec.build({"experiment": {"repeats": 1},
                      "tunnel": [{"kind": "ssh-forward"}, {"kind": "vxlan"},
                                 {"kind": "wireguard", "impl": "go", "label": "wg-go"},
                                 {"kind": "wireguard", "impl": "kernel", "label": "wg-k"}],
                      "workload": [{"name": "stream"}]})
    rec = {c.tunnel.label: tunnel_identity(c) for c in plan(exp)}
    assert (rec["ssh-forward"]["carries"], rec["ssh-forward"]["kernel_datapath"]) == \
        (["tcp"], False)
    assert (rec["vxlan"]["carries"], rec["vxlan"]["kernel_datapath"]) == \
        (["tcp", "udp", "l2"], True)
    assert (rec["wg-go"]["kernel_datapath"], rec["wg-k"]["kernel_datapath"]) == (False, True)
    for kind, drv in tunnels.registry().items():
        assert set(drv.carries) <= set(tunnels.base.CARRIES) and "tcp" in drv.carries, kind
        assert set(drv.userspace) <= {"", *drv.implementations()}, kind


def test_files_recorded_before_get_the_declarations_frozen_in_the_upgrader() -> None:
    """results/upgrade.py fills `carries`/`kernel_datapath` of older case files (and a chain's
    gateway record) from a frozen table: it matches today's drivers for every kind and
    implementation, so an old file and a new one of the same kind say the same."""
    from tunbench.results import upgrade
    for kind, drv in tunnels.registry().items():
        for impl in drv.implementations() or (None,):
            assert upgrade.v2_declared(kind, impl) == {
                "carries": list(drv.carries),
                "kernel_datapath": drv.kernel_datapath(impl)}, (kind, impl)
    doc = {"format": "tunbench-case", "case": {"tunnel": {"kind": "ipsec", "impl": "libipsec"}},
           "testbed": {"chain": {"gateway_tunnel": {"kind": "wireguard", "impl": "kernel"}}}}
    got = upgrade.fill_v2(doc)
    assert got["case"]["tunnel"]["kernel_datapath"] is False
    assert got["testbed"]["chain"]["gateway_tunnel"] == {
        "kind": "wireguard", "impl": "kernel", "carries": ["tcp", "udp"],
        "kernel_datapath": True}
    recorded = {**doc, "case": {"tunnel": {"kind": "vxlan", "carries": ["tcp"]}}}
    assert upgrade.fill_v2(recorded)["case"]["tunnel"]["carries"] == ["tcp"]   # kept


def test_aggregating_kinds_are_declared_recorded_and_frozen_for_older_files() -> None:
    """An aggregating kind declares its flush-timeout parameter and the kind its trade-off
    is measured against (report/tradeoff.py reads them from the case, not a kind name); the
    upgrader's frozen table matches today's drivers, so a file from before says the same."""
    from tunbench.results import upgrade
    declared = {k: d.aggregation() for k, d in tunnels.registry().items() if d.aggregation()}
    assert declared == {"agg": {"param": "flush_us", "baseline": "vxlan"}}
    for kind, drv in tunnels.registry().items():
        assert upgrade.v2_aggregation(kind) == drv.aggregation(), kind
        agg = drv.aggregation()
        if agg:   # a parameter of the kind, and a baseline that is a kind
            assert agg["param"] in {f.name for f in dataclasses.fields(drv.Params)}, kind
            assert agg["baseline"] in tunnels.registry(), kind
    old = {"format": "tunbench-case", "case": {"tunnel": {"kind": "agg", "impl": None}}}
    assert upgrade.fill_v2(old)["case"]["tunnel"]["aggregation"] == {
        "param": "flush_us", "baseline": "vxlan"}
    old["case"]["tunnel"]["kind"] = "vxlan"
    assert upgrade.fill_v2(old)["case"]["tunnel"]["aggregation"] is None
