"""tunbench doctor: what this host can run, exactly why not, and with which tools and kernel.

Read-only by default: it asks every registered tunnel kind (discovered through the registry,
never by name) for its requirements, once per value of an `impl` or `datapath` parameter when
the kind has one, and reads tool versions, the kernel release and configuration, and whether it
runs as root. Nothing is created and nothing in the root namespace is touched. With `probe`,
it builds a throwaway two-namespace testbed through the normal ledger, reports the underlay
veth's offloads (`ethtool -k`), and tears it down.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import typing
from typing import Any

from . import tunnels
from .capabilities import kernel_config, root_missing
from .errors import TunbenchError
from .results import envinfo

VARIANT_PARAMS = ("impl", "datapath")
KERNEL_OPTIONS = (
    "CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_TUN", "CONFIG_DUMMY", "CONFIG_VXLAN",
    "CONFIG_GENEVE", "CONFIG_NET_IPGRE", "CONFIG_NET_IPIP", "CONFIG_IPV6_SIT",
    "CONFIG_L2TP", "CONFIG_WIREGUARD", "CONFIG_XFRM", "CONFIG_INET_ESP", "CONFIG_INET6_ESP",
    "CONFIG_XFRM_USER", "CONFIG_OPENVSWITCH", "CONFIG_IPV6", "CONFIG_IPV6_SEG6_LWTUNNEL",
    "CONFIG_IPV6_SEG6_BPF", "CONFIG_LWTUNNEL", "CONFIG_LWTUNNEL_BPF", "CONFIG_BPF_SYSCALL",
    "CONFIG_NET_CLS_BPF", "CONFIG_NET_SCH_TBF", "CONFIG_NET_SCH_HTB", "CONFIG_NET_SCH_NETEM",
    "CONFIG_NET_SCH_FQ", "CONFIG_IFB", "CONFIG_NET_ACT_MIRRED", "CONFIG_MODULES",
    # loss-search's capture receiver: AF_PACKET ring + clsact with a bpf drop filter
    "CONFIG_PACKET", "CONFIG_NET_SCH_INGRESS",
)
DOCTOR_TOOLS = ("ip", "tc", "ethtool", "iperf3", "ping", "ss", "sysctl", "ssh", "sshd",
                "wg", "wireguard-go", "swanctl", "ovs-vswitchd", "sockperf")


def variant_values(params_cls: type) -> tuple[str, list[Any]] | None:
    """(field name, values) of a Params `impl`/`datapath` field: the values of its Literal type
    (also inside Optional/Union), else its default; "auto", "" and None are left out."""
    hints = typing.get_type_hints(params_cls)
    for f in dataclasses.fields(params_cls):
        if f.name not in VARIANT_PARAMS:
            continue
        want = hints[f.name]
        members = (typing.get_args(want) if typing.get_origin(want) is not typing.Literal
                   else (want,))
        values: list[Any] = []
        for t in members:
            if typing.get_origin(t) is typing.Literal:
                values += list(typing.get_args(t))
        if not values and f.default is not dataclasses.MISSING:
            values = [f.default]
        return f.name, [v for v in values if v not in ("", None, "auto")]
    return None


def _check(drv: Any, raw: dict[str, Any]) -> dict[str, Any]:
    try:
        params = drv.parse_params(raw)
        missing = drv.requirements(params)
    except TunbenchError as exc:
        return {"available": False, "reasons": [exc.one_line()]}
    except Exception as exc:  # a driver's bug must not hide the others
        return {"available": False, "reasons": [f"requirements() failed: "
                                                f"{type(exc).__name__}: {exc}"]}
    return {"available": not missing, "reasons": [m.one_line() for m in missing]}


def kinds_report() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, drv in sorted(tunnels.registry().items()):
        entry: dict[str, Any] = {"summary": drv.summary, **_check(drv, {})}
        variants = variant_values(drv.Params)
        if variants:
            name, values = variants
            entry["variant_param"] = name
            entry["variants"] = {str(v): _check(drv, {name: v}) for v in values}
            # the kind runs if any implementation does (the default is chosen automatically)
            entry["available"] = entry["available"] or any(
                v["available"] for v in entry["variants"].values())
        out[kind] = entry
    return out


def kernel_report() -> dict[str, Any]:
    conf = kernel_config()
    return {"release": platform.release(), "version": platform.version(),
            "config_readable": conf is not None,
            "options": {o: (conf.get(o, "not set") if conf is not None else "unknown")
                        for o in KERNEL_OPTIONS}}


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
        "tools": envinfo.tool_versions(list(dict.fromkeys(
            [*envinfo.VERSION_ARGS, *DOCTOR_TOOLS]))),
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
        for val, v in (e.get("variants") or {}).items():
            label = f"{e['variant_param']}={val}"
            lines.append(f"  {'':<{width}}  {label:<22}{'yes' if v['available'] else 'no'}")
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
