"""Upgraders of older result files, registered in reader.UPGRADERS: the one place that knows
what an older format meant (flent's unserialise_compat idea). Each takes a version-N document
(index or case) and returns the version N+1 one; the reader chains them.

v1 -> v2: version 1 packed a metric's dimensions into its name (`lat_p50_us_at_10pct_ndr_imix`,
`tcp_rtt_p99`, `x@streams8`, `ndr_pps_imix`) and left the report to ask the live registries
what a workload is judged by and whether a tunnel encrypts. The names are decoded here, once,
into base + dims, and the case gets the workload and tunnel records as the v1-era drivers
declared them (frozen below: a later driver's change must not rewrite old results).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .model import CASE_FORMAT

# -- v1 -> v2 ------------------------------------------------------------------------------

# As the v1-era workloads declared them: headline metrics, the list parameter (sweep).
V1_WORKLOADS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "stream": (("throughput", "retransmits"), None),
    "parallel-streams": (("throughput", "retransmits"), "streams"),
    "line-rate-processes": (("throughput", "line_rate_pct"), None),
    "latency": (("tcp_rtt_p50", "udp_rtt_p50", "tcp_rtt_p99", "udp_rtt_p99"), None),
    "loss-search": (("ndr_pps_imix", "pdr_pps_imix", "ndr_pps_361", "pdr_pps_361",
                     "rfc2544_pps_imix", "rfc2544_pps_361"), None),
    "ping": (("rtt_avg", "hops"), None),
}
# workload parameters a v1 report read as a sweep's x axis when they varied
V1_AXES = ("streams", "processes", "parallel", "flows", "connections")
V1_ENCRYPTING_KINDS = ("wireguard", "ipsec", "ssh-tun", "ssh-forward")
V1_IMPL_KEYS = ("impl", "datapath")

_SWEEP_METRIC = re.compile(r"^(?P<base>.+?)@(?P<param>[a-z_]+?)(?P<x>\d+)$")
_RTT = re.compile(r"^(?P<base>(?:tcp|udp)_rtt)_(?P<stat>min|max|mean|avg|p(?P<q>\d+)"
                  r"(?:[_.](?P<frac>\d+))?)$")
_PCTL = re.compile(r"^(?P<base>.+)_p(?P<q>\d+)(?:[_.](?P<frac>\d+))?$")
_RATE = re.compile(r"^(?P<goal>ndr|pdr|rfc2544)_(?:pps|mbps_(?P<layer>l2|l3))_(?P<size>\w+)$")
_LAT_AT = re.compile(r"^lat_p(?P<q>\d+)_us_at_(?:(?P<pct>\d+(?:\.\d+)?)pct_)?"
                     r"(?P<goal>ndr|pdr|rfc2544)_(?P<size>[0-9]+|imix)$")
_MAX_OFFERED = re.compile(r"^max_offered_pps_(?P<size>\w+)$")
_NDR = re.compile(r"^(?P<goal>ndr|pdr)(?:[_@](?:size)?(?P<size>[\w.]+))?$")


def _q(m: re.Match[str]) -> float:
    return float(m["q"] + (f".{m['frac']}" if m["frac"] else ""))


def _num(text: str) -> int | float:
    return int(text) if text.isdigit() else float(text)


def v1_metric_dims(name: str) -> tuple[str, dict[str, Any]]:
    """(base, dims) of a v1 metric name; a name with no packed dimension is its own base.
    The loss search's families first (an NDR's `@size1518` is a frame size, not a sweep)."""
    if m := _RATE.match(name):
        found: dict[str, Any] = {"goal": m["goal"], "size": m["size"]}
        return ("rate_mbps", {**found, "layer": m["layer"]}) if m["layer"] \
            else ("rate_pps", found)
    if m := _LAT_AT.match(name):
        load = {"load_pct": _num(m["pct"])} if m["pct"] else {}
        return "latency", {"q": float(m["q"]), "goal": m["goal"], **load, "size": m["size"]}
    if m := _MAX_OFFERED.match(name):
        return "max_offered_pps", {"size": m["size"]}
    if m := _NDR.match(name):   # v1 convention for other NDR/PDR writers: ndr_64, pdr@size1518
        return m["goal"], ({"size": m["size"]} if m["size"] else {})
    if m := _SWEEP_METRIC.match(name):
        base, inner = v1_metric_dims(m["base"])
        return base, {**inner, m["param"]: int(m["x"])}
    if m := _RTT.match(name):
        return m["base"], ({"q": _q(m)} if m["q"] else {"stat": m["stat"]})
    if m := _PCTL.match(name):
        return m["base"], {"q": _q(m)}
    return name, {}


def _v1_tunnel(doc: dict[str, Any]) -> dict[str, Any]:
    """The tunnel record of a v1 case: kept where the case recorded it (late v1 files did),
    else the implementation the driver reported in the tunnel's info, else a non-automatic
    impl/datapath parameter; encrypts from the kinds that declared it."""
    t = doc["case"]["tunnel"]
    if "display" in t and "encrypts" in t:
        return {**t, "impl": t.get("impl"), "encrypts": bool(t["encrypts"]),
                "display": str(t["display"])}
    info = (doc.get("tunnel") or {}).get("info") or {}
    params = t.get("params") or {}
    found = [src.get(k) for src in (info, params) for k in V1_IMPL_KEYS]
    impl = next((str(v) for v in found if v not in (None, "", "auto")), None)
    return {**t, "impl": impl, "encrypts": t["kind"] in V1_ENCRYPTING_KINDS,
            "display": f"{t['label']} ({impl})" if impl else str(t["label"])}


def _v1_workload(w: dict[str, Any]) -> dict[str, Any]:
    headline, sweep = V1_WORKLOADS.get(str(w.get("name")), ((), None))
    params = w.get("params") or {}
    axes = [p for p in V1_AXES if p in params]
    return {**w, "headline": list(headline), "sweep_param": sweep, "axes": axes}


def v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    if doc.get("format") != CASE_FORMAT:
        return dict(doc)   # the index's fields did not change
    metrics = {}
    for name, m in (doc.get("metrics") or {}).items():
        if not isinstance(m, dict):
            continue
        base, dims = v1_metric_dims(name)
        metrics[name] = {"base": base, "value": m.get("value"), "unit": m.get("unit", ""),
                         "higher_is_better": m.get("higher_is_better", True),
                         "bound": m.get("bound"), "dims": dims}
    case = doc.get("case") or {}
    new_case = dict(case)
    if isinstance(case.get("tunnel"), dict):
        new_case["tunnel"] = _v1_tunnel(doc)
    if isinstance(case.get("workload"), dict):
        new_case["workload"] = _v1_workload(case["workload"])
    return {**doc, "case": new_case, "metrics": metrics}


UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: v1_to_v2}


# -- fields added within v2 ------------------------------------------------------------------

# What a kind carries and whether its datapath runs in the kernel, as the drivers declared
# them (TunnelDriver.carries, .userspace) when the tunnel record began to say so: case files
# written before (every v1 file, early v2 files, and a chain's gateway tunnel record) get
# them from here, frozen like V1_ENCRYPTING_KINDS (tests/unit/test_driver_registry.py checks
# the table against the drivers of the kinds it names).
V2_CARRIES_L2 = ("vxlan", "geneve", "gretap", "l2tp", "ovs-vxlan", "ovs-geneve", "ovs-gre",
                 "ovs-stt")
V2_CARRIES_TCP_ONLY = ("ssh-forward",)
V2_USERSPACE: dict[str, tuple[str, ...]] = {
    "wireguard": ("go",), "ipsec": ("libipsec",), "ovs-vxlan": ("netdev",),
    "ovs-geneve": ("netdev",), "ovs-gre": ("netdev",), "ovs-stt": ("netdev",), "agg": ("",),
    "ssh-forward": ("",), "ssh-tun": ("",)}


# Aggregating kinds as their drivers declared them (TunnelDriver.aggregates,
# .aggregation_baseline) when the tunnel record began to say so: kind -> (flush-timeout
# parameter, baseline kind); frozen like the tables above.
V2_AGGREGATION: dict[str, tuple[str, str | None]] = {"agg": ("flush_us", "vxlan")}


def v2_aggregation(kind: str) -> dict[str, Any] | None:
    """{"param", "baseline"} of an aggregating kind recorded before the record said so."""
    found = V2_AGGREGATION.get(kind)
    return {"param": found[0], "baseline": found[1]} if found else None


def v2_declared(kind: str, impl: str | None) -> dict[str, Any]:
    """{"carries", "kernel_datapath"} of a kind (and implementation) recorded before the
    tunnel record said so."""
    carries = ["tcp"] if kind in V2_CARRIES_TCP_ONLY else \
        ["tcp", "udp", "l2"] if kind in V2_CARRIES_L2 else ["tcp", "udp"]
    user = V2_USERSPACE.get(kind, ())
    return {"carries": carries, "kernel_datapath": "" not in user and (impl or "") not in user}


def fill_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A case whose tunnel record (or chain gateway record) lacks `carries` /
    `kernel_datapath` gets them from v2_declared, one that lacks `aggregation` from
    v2_aggregation; anything else is returned unchanged."""
    if doc.get("format") != CASE_FORMAT:
        return doc
    case = doc.get("case") or {}
    t = case.get("tunnel")
    if isinstance(t, dict) and "carries" not in t and "kind" in t:
        t = {**t, **v2_declared(str(t["kind"]), t.get("impl"))}
        doc = {**doc, "case": {**case, "tunnel": t}}
    if isinstance(t, dict) and "aggregation" not in t and "kind" in t:
        doc = {**doc, "case": {**case, "tunnel": {**t, "aggregation": v2_aggregation(
            str(t["kind"]))}}}
    tb = doc.get("testbed")
    chain = tb.get("chain") if isinstance(tb, dict) else None
    gw = chain.get("gateway_tunnel") if isinstance(chain, dict) else None
    if isinstance(tb, dict) and isinstance(chain, dict) and isinstance(gw, dict) \
            and "carries" not in gw and "kind" in gw:
        gw = {**gw, **v2_declared(str(gw["kind"]), gw.get("impl"))}
        doc = {**doc, "testbed": {**tb, "chain": {**chain, "gateway_tunnel": gw}}}
    return doc
