"""tunbench doctor: what this host can run, exactly why not, and with which tools and kernel.

Read-only by default: it asks every registered tunnel kind (discovered through the registry,
never by name) for its requirements, once per implementation it declares (wireguard kernel|go,
ipsec libipsec|kernel|xfrm, ovs-* netdev|system), and reads tool versions, the kernel release
and the kernel options the drivers declare (plus the testbed's own), and whether it runs as
root. Nothing is created and nothing in the root namespace is touched. With `probe`,
it builds a throwaway two-namespace testbed through the normal ledger, reports the underlay
veth's offloads (`ethtool -k`), and tears it down.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from . import tunnels
from .capabilities import kernel_config, root_missing
from .errors import TunbenchError
from .results import envinfo

# The testbed's, the workloads' and the VM lab's own kernel options; the tunnel kinds' come
# from their drivers' declarations (tunnels.kernel_options()).
BASE_KERNEL_OPTIONS = (
    "CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_TUN", "CONFIG_DUMMY", "CONFIG_XFRM",
    "CONFIG_IPV6_SEG6_BPF", "CONFIG_LWTUNNEL", "CONFIG_LWTUNNEL_BPF", "CONFIG_BPF_SYSCALL",
    "CONFIG_NET_CLS_BPF", "CONFIG_NET_SCH_TBF", "CONFIG_NET_SCH_HTB", "CONFIG_NET_SCH_NETEM",
    "CONFIG_NET_SCH_FQ", "CONFIG_IFB", "CONFIG_NET_ACT_MIRRED", "CONFIG_MODULES",
    # loss-search's capture receiver: AF_PACKET ring + clsact with a bpf drop filter
    "CONFIG_PACKET", "CONFIG_NET_SCH_INGRESS",
    "CONFIG_BRIDGE",   # the mesh testbed's underlay (testbed/mesh.py)
)
# the testbed's and the workloads' tools; the tunnel kinds' come from their declarations
BASE_TOOLS = ("ip", "tc", "ethtool", "iperf3", "ping", "ss", "sysctl", "sockperf")


def kernel_options() -> list[str]:
    return list(dict.fromkeys([*BASE_KERNEL_OPTIONS, *tunnels.kernel_options()]))


def doctor_tools() -> list[str]:
    return list(dict.fromkeys([*envinfo.VERSION_ARGS, *BASE_TOOLS, *tunnels.declared_tools()]))


def kinds_report() -> dict[str, Any]:
    """Per kind: its summary, whether it runs here (with the implementation chosen
    automatically) and, for a kind with implementations, each one available or why not."""
    out: dict[str, Any] = {}
    for kind, drv in sorted(tunnels.registry().items()):
        auto, *impls = tunnels.availability(kind)
        entry: dict[str, Any] = {"summary": drv.summary, "encrypts": drv.encrypts,
                                 "available": auto.available, "reasons": auto.reasons}
        if impls:
            entry["variant_param"] = drv.impl_param
            entry["variants"] = {str(r.impl): {"display": r.display, "available": r.available,
                                          "reasons": r.reasons} for r in impls}
        out[kind] = entry
    return out


def kernel_report() -> dict[str, Any]:
    conf = kernel_config()
    return {"release": platform.release(), "version": platform.version(),
            "config_readable": conf is not None,
            "options": {o: (conf.get(o, "not set") if conf is not None else "unknown")
                        for o in kernel_options()}}


def probe_offloads() -> dict[str, Any]:
    """Build a throwaway testbed (ledger-journaled), read the veth's offloads, tear it down."""
    from .testbed import local, names, netlink
    from .testbed.ledger import Ledger
    m = root_missing()
    if m:
        return {"error": m.one_line()}
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        return {"interface": "veth (underlay of the local testbed)", "run_id": rid,
                "ethtool_k": envinfo.offloads(tb.a.netns, tb.a.underlay_if)}
    finally:
        errors = ledger.close()
        local.sweep(rid)
        if errors:
            raise TunbenchError("doctor --probe could not tear down its testbed: "
                                + "; ".join(errors), "run tunbench cleanup")


def report(probe: bool = False) -> dict[str, Any]:
    root = root_missing()
    doc: dict[str, Any] = {
        "format": "tunbench-doctor", "format_version": 1,
        "root": root is None, "euid": os.geteuid(),
        "root_note": root.one_line() if root else None,
        "kernel": kernel_report(),
        "tools": envinfo.tool_versions(doctor_tools()),
        "tunnels": kinds_report(),
        "offloads": probe_offloads() if probe else
        {"note": "not probed (read-only by default); use --probe to build a throwaway "
                 "testbed and read the underlay veth's ethtool -k"},
    }
    return doc


def format_table(doc: dict[str, Any]) -> str:
    lines = [f"kernel {doc['kernel']['release']}  root: {'yes' if doc['root'] else 'no'}"
             + (f" ({doc['root_note']})" if doc["root_note"] else ""), "", "tunnel kinds:"]
    width = max([len(k) for k in doc["tunnels"]] + [8]) + 2
    for kind, e in doc["tunnels"].items():
        lines.append(f"  {kind:<{width}}{'yes' if e['available'] else 'NO ':<5}{e['summary']}")
        for r in e["reasons"] if not e.get("variants") else []:
            lines.append(f"  {'':<{width}}     - {r}")
        for v in (e.get("variants") or {}).values():
            lines.append(f"  {'':<{width}}  {v['display']:<22}{'yes' if v['available'] else 'no'}")
            for r in v["reasons"]:
                lines.append(f"  {'':<{width}}      - {r}")
    lines += ["", "tools:"]
    for tool, ver in doc["tools"].items():
        lines.append(f"  {tool:<14}{ver or 'not installed'}")
    lines += ["", "kernel options:"]
    for opt, val in doc["kernel"]["options"].items():
        lines.append(f"  {opt:<28}{val}")
    lines += ["", "underlay offloads:"]
    off = doc["offloads"]
    if "ethtool_k" in off:
        for feat, val in off["ethtool_k"].items():
            lines.append(f"  {feat:<40}{val}")
    else:
        lines.append(f"  {off.get('error') or off.get('note')}")
    return "\n".join(lines)
