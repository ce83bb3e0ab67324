"""The flush-timeout trade-off of the aggregating tunnel (agg, docs/agg.md): what waiting for
company buys on the wire and costs in latency, per flush timeout, against native and kernel
VXLAN of the same campaign. Pure over the case documents; drawn by figures/tradeoff.py, shown
as a table here and said in one take-away.

A campaign has the trade-off when its ok agg cases ran at two or more flush timeouts (the
recorded `case.tunnel.params.flush_us`; 0 = no aggregation). Per variant (each agg flush
timeout, native, vxlan), means over repeats of:

- wire packets per inner packet and wire bytes per inner byte, CPU per Mpps (the host's, and
  tbagg's own): the loss search's latency-under-load trial (`wire_pkts_per_inner`,
  `wire_bytes_per_inner_byte`, `cpu_per_mpps`, `datapath_cpu_per_mpps` at the highest
  `load_pct` recorded, docs/loss-search.md);
- inner packets/s at the loss threshold: the RFC 2544 rate (`rate_pps`, goal `rfc2544`),
  else MLRsearch's NDR;
- added latency p50/p99: the latency workload's RTT (`udp_rtt`, else `tcp_rtt`) minus
  native's, and the loss search's one-way latency at that load minus native's.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..results.model import metric_records
from . import stats
from .data import Campaign, tunnel

COST_BASES = ("wire_pkts_per_inner", "wire_bytes_per_inner_byte", "cpu_per_mpps",
              "datapath_cpu_per_mpps")
_COST_KEYS = {"wire_pkts_per_inner": "wire_pkts", "wire_bytes_per_inner_byte": "wire_bytes",
              "cpu_per_mpps": "cpu", "datapath_cpu_per_mpps": "dp_cpu"}
RTTS = ("udp_rtt", "tcp_rtt")
KNEE = 0.05   # the take-away's timeout: the shortest within 5 % of the best packet rate

# (key, panel title, unit, lower is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("wire_pkts", "wire packets per inner packet", "packets", True),
    ("wire_bytes", "wire bytes per inner byte", "bytes per byte", True),
    ("pps", "inner packets/s at the loss threshold", "packets/s", False),
    ("cpu", "CPU per Mpps", "cores per Mpps", True),
    ("add_p50", "added latency p50", "µs", True),
    ("add_p99", "added latency p99", "µs", True),
)


@dataclass
class Variant:
    label: str
    kind: str
    flush_us: int | None          # agg only
    values: dict[str, float] = field(default_factory=dict)   # METRICS key -> mean
    n: dict[str, int] = field(default_factory=dict)          # repeats behind each mean


@dataclass
class Tradeoff:
    mtu: int
    offloads: str
    size: str | None              # the loss search's packet size (IP bytes) the figures are at
    load_pct: float | None        # where wire/CPU/loaded latency were measured, % of threshold
    goal: str | None              # rfc2544 or ndr: the threshold the pps are at
    threshold_pct: float | None   # the loss threshold of that goal, % of packets
    rtt: str | None               # the latency workload's metric behind added RTT
    aggs: list[Variant]           # by flush_us
    native: Variant | None
    vxlan: Variant | None

    @property
    def refs(self) -> list[Variant]:
        return [v for v in (self.native, self.vxlan) if v is not None]

    def loaded(self, key: str) -> str:
        """The loaded one-way latency's key beside an added-RTT key (add_p50 -> add_p50_load)."""
        return f"{key}_load"


def _flush(doc: dict[str, Any]) -> int | None:
    t = doc["case"]["tunnel"]
    if t["kind"] != "agg":
        return None
    v = (t.get("params") or {}).get("flush_us")
    return int(v) if isinstance(v, (int, float)) else None


def _raw(docs: list[dict[str, Any]], size: str | None, load: float | None, goal: str | None,
         rtt: str | None) -> dict[str, list[float]]:
    """Values per repeat of one variant (before averaging), keyed like METRICS, with the
    absolute latencies under lat_p50/lat_p99 (RTT) and lat_p50_load/lat_p99_load."""
    out: dict[str, list[float]] = {}
    for d in docs:
        for rec in metric_records(d).values():
            if rec.value is None:
                continue
            dims = rec.dims
            key = None
            if rec.base in COST_BASES and dims.get("size") == size \
                    and dims.get("load_pct") == load:
                key = _COST_KEYS[rec.base]
            elif rec.base == "rate_pps" and dims.get("goal") == goal \
                    and dims.get("size") == size:
                key = "pps"
            elif rec.base == rtt and set(dims) == {"q"} and dims["q"] in (50, 99):
                key = f"lat_p{int(dims['q'])}"
            elif rec.base == "latency" and dims.get("load_pct") == load \
                    and dims.get("size") == size and dims.get("q") in (50, 99):
                key = f"lat_p{int(dims['q'])}_load"
            if key:
                out.setdefault(key, []).append(float(rec.value))
    return out


def _choose(docs: list[dict[str, Any]]) -> tuple[str | None, float | None, str | None,
                                                  str | None]:
    """(size, load_pct, goal, rtt metric) the campaign's agg cases recorded: the first size
    with wire figures, their highest load, rfc2544 before ndr, udp_rtt before tcp_rtt."""
    sizes: dict[str, set[Any]] = {}
    goals: set[str] = set()
    rtts: set[str] = set()
    for d in docs:
        for rec in metric_records(d).values():
            if rec.base in COST_BASES and rec.value is not None and "size" in rec.dims:
                sizes.setdefault(str(rec.dims["size"]), set()).add(rec.dims.get("load_pct"))
            if rec.base == "rate_pps" and rec.value is not None:
                goals.add(str(rec.dims.get("goal")))
            if rec.base in RTTS and rec.value is not None:
                rtts.add(rec.base)
    for d in docs if not sizes else ():   # a campaign from before the wire figures
        for rec in metric_records(d).values():
            if rec.base == "rate_pps" and rec.value is not None and "size" in rec.dims:
                sizes.setdefault(str(rec.dims["size"]), set())
    size = next(iter(sizes), None)
    loads = [x for x in sizes.get(size or "", ()) if isinstance(x, (int, float))]
    goal = next((g for g in ("rfc2544", "ndr") if g in goals), None)
    rtt = next((r for r in RTTS if r in rtts), None)
    return size, (max(loads) if loads else None), goal, rtt


def _threshold(docs: list[dict[str, Any]], goal: str | None) -> float | None:
    for d in docs:
        w = d["case"]["workload"]
        if w.get("base", w["name"]) != "loss-search":
            continue
        p = w.get("params") or {}
        key = {"rfc2544": "loss_threshold_pct", "ndr": "ndr_loss_pct"}.get(goal or "")
        if key and isinstance(p.get(key), (int, float)):
            return float(p[key])
    return None


def find(c: Campaign) -> list[Tradeoff]:
    """One trade-off per (underlay MTU, offload variant) whose agg cases ran at >= 2 flush
    timeouts."""
    out = []
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for d in (r.doc for r in c.ok):
        groups.setdefault((int(d["case"]["mtu"]), d["case"]["offloads"]["name"]), []).append(d)
    for (mtu, off), docs in groups.items():
        flushes = {f for f in (_flush(d) for d in docs) if f is not None}
        if len(flushes) < 2:
            continue
        aggs = [d for d in docs if _flush(d) is not None]
        size, load, goal, rtt = _choose(aggs)
        raw: dict[str, dict[str, list[float]]] = {}
        meta: dict[str, tuple[str, int | None]] = {}
        for d in docs:
            lab = tunnel(d)
            kind = d["case"]["tunnel"]["kind"]
            if kind not in ("agg", "native", "vxlan"):
                continue
            meta.setdefault(lab, (kind, _flush(d)))
        for lab in meta:
            raw[lab] = _raw([d for d in docs if tunnel(d) == lab], size, load, goal, rtt)
        native = next((lab for lab, (k, _) in meta.items() if k == "native"), None)
        base = {k: stats.summarize(v).mean for k, v in (raw.get(native or "") or {}).items()}
        variants: dict[str, Variant] = {}
        for lab, (kind, flush) in meta.items():
            v = Variant(lab, kind, flush)
            for k, vals in raw[lab].items():
                v.values[k] = stats.summarize(vals).mean
                v.n[k] = len(vals)
            for q in ("p50", "p99"):
                for suffix in ("", "_load"):
                    if f"lat_{q}{suffix}" in v.values and f"lat_{q}{suffix}" in base:
                        v.values[f"add_{q}{suffix}"] = (v.values[f"lat_{q}{suffix}"]
                                                        - base[f"lat_{q}{suffix}"])
            variants[lab] = v
        ags = sorted((v for v in variants.values() if v.kind == "agg"),
                     key=lambda v: (v.flush_us or 0, v.label))
        vx = next((v for v in variants.values() if v.kind == "vxlan"), None)
        out.append(Tradeoff(mtu, off, size, load, goal, _threshold(docs, goal), rtt, ags,
                            variants.get(native or ""), vx))
    return out


# -- the table -----------------------------------------------------------------------------

def fmt(key: str, v: float | None) -> str:
    if v is None:
        return "–"
    if key == "pps":
        return f"{v:,.0f}"
    if key.startswith("add_"):
        return f"{v:+,.0f}"
    if key == "wire_pkts":
        return f"{v:.3f}"
    return f"{v:.2f}"


def columns(t: Tradeoff) -> list[tuple[str, str]]:
    """(value key, header) of the table, the loaded latency beside the idle RTT."""
    load = f"{t.load_pct:g}%" if t.load_pct is not None else "?"
    thr = f"{t.threshold_pct:g}% loss" if t.threshold_pct is not None else "the threshold"
    cols = [("wire_pkts", f"wire pkts / inner pkt (at {load})"),
            ("wire_bytes", f"wire B / inner B (at {load})"),
            ("pps", f"inner pkt/s at {thr}"),
            ("cpu", f"CPU per Mpps (cores, host, at {load})"),
            ("dp_cpu", f"tbagg CPU per Mpps (cores, at {load})")]
    rtt = t.rtt or "RTT"
    for q in ("p50", "p99"):
        cols.append((f"add_{q}", f"added {q} µs ({rtt} idle)"))
        cols.append((f"add_{q}_load", f"added {q} µs (one-way at {load})"))
    return cols


def rows(t: Tradeoff) -> list[tuple[str, list[str]]]:
    """(variant name, cells) in figure order: agg by flush timeout, then native and vxlan;
    each value with its ratio to vxlan's where vxlan has it (pps, wire, CPU)."""
    out = []
    for v in [*t.aggs, *t.refs]:
        name = v.label + (f" (flush {v.flush_us} µs)" if v.flush_us is not None else "")
        cells = []
        for key, _ in columns(t):
            val = v.values.get(key)
            txt = fmt(key, val)
            ref = t.vxlan.values.get(key) if t.vxlan is not None else None
            if val is not None and ref and not key.startswith("add_") and v is not t.vxlan:
                txt += f" ({val / ref:.2f}× vxlan)"
            cells.append(txt)
        out.append((name, cells))
    return out


def section_html(c: Campaign) -> str:
    parts = []
    for t in find(c):
        head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns(t))
        body = "".join(
            f"<tr><td>{html.escape(name)}</td>"
            + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>"
            for name, cells in rows(t))
        parts.append(
            f"<h3 id=agg-tradeoff>agg flush-timeout trade-off (MTU {t.mtu}"
            + ("" if t.offloads == "default" else f", offloads {html.escape(t.offloads)}")
            + (f", {html.escape(t.size)} B inner UDP" if t.size else "") + ")</h3>"
            f"<p>{html.escape(caption(t))}</p>"
            f"<table><thead><tr><th>variant</th>{head}</tr></thead><tbody>{body}</tbody>"
            "</table>")
    return "".join(parts)


def caption(t: Tradeoff) -> str:
    load = f"{t.load_pct:g}%" if t.load_pct is not None else "a fixed share"
    goal = {"rfc2544": "RFC 2544 binary search", "ndr": "MLRsearch NDR"}.get(t.goal or "",
                                                                            "loss search")
    return (f"Means over repeats. Wire and CPU at {load} of each variant's own loss "
            f"threshold ({goal}), counted on site a's underlay (outer packets and bytes incl. "
            "the Ethernet header) per inner packet and inner IP byte; CPU: busy core-seconds "
            "of the whole host per million inner packets (sender, tunnel ends, receiver and "
            "any other user of the host share it), and tbagg's own (both sites). Added latency: over native of the same run, "
            f"{t.rtt or 'RTT'} of the latency workload (idle ping-pong: each message waits "
            f"up to the flush timeout each way) and the loss search's one-way latency at "
            f"{load}. flush 0 = no aggregation.")


# -- the take-away -------------------------------------------------------------------------

def takeaway_texts(c: Campaign) -> list[tuple[str, dict[str, Any]]]:
    """'agg at 50 µs: 1.58× vxlan's packets/s at 0.1% loss, 0.66× its wire bytes per inner
    byte, +225 µs p50 RTT over native (vxlan +20)', for the shortest aggregating timeout whose
    packet rate is within KNEE of the sweep's best, when vxlan's figures are there."""
    out = []
    for t in find(c):
        vx = t.vxlan
        cands = [v for v in t.aggs if v.flush_us and "pps" in v.values]
        if vx is None or not cands or not vx.values.get("pps"):
            continue
        top = max(v.values["pps"] for v in cands)
        # the knee: the shortest timeout within KNEE of the best rate (more waiting buys
        # little more rate and only adds latency)
        best = min((v for v in cands if v.values["pps"] >= (1 - KNEE) * top),
                   key=lambda v: v.flush_us or 0)
        thr = f"{t.threshold_pct:g}% loss" if t.threshold_pct is not None else "the loss threshold"
        parts = [f"{best.values['pps'] / vx.values['pps']:.2f}× {vx.label}'s packets/s at "
                 f"{thr} ({best.values['pps']:,.0f} against {vx.values['pps']:,.0f}, "
                 f"{t.size} B)"]
        facts: dict[str, Any] = {"workload": "agg-tradeoff", "flush_us": best.flush_us, "label": best.label,
                                 "pps_ratio": best.values["pps"] / vx.values["pps"]}
        if best.values.get("wire_bytes") and vx.values.get("wire_bytes"):
            r = best.values["wire_bytes"] / vx.values["wire_bytes"]
            facts["wire_bytes_ratio"] = r
            parts.append(f"{r:.2f}× its wire bytes per inner byte")
        if "wire_pkts" in best.values:
            parts.append(f"{1 / best.values['wire_pkts']:.1f} inner packets per datagram"
                         if best.values["wire_pkts"] > 0 else "no datagrams counted")
        for q in ("p50", "p99"):
            add = best.values.get(f"add_{q}")
            if add is not None:
                facts[f"add_{q}"] = add
                ref = vx.values.get(f"add_{q}")
                parts.append(f"{add:+,.0f} µs {q} {t.rtt or 'RTT'} over native"
                             + (f" ({vx.label} {ref:+,.0f})" if ref is not None else ""))
        facts["best_pps_flush_us"] = max(cands, key=lambda v: v.values["pps"]).flush_us
        text = (f"agg at {best.flush_us} µs (the shortest flush timeout within "
                f"{KNEE:.0%} of the best packet rate of the sweep; MTU {t.mtu}): "
                + ", ".join(parts) + ".")
        zero = next((v for v in t.aggs if v.flush_us == 0 and v.values.get("pps")), None)
        if zero is not None:
            text += (f" Without aggregation (flush 0): {zero.values['pps'] / vx.values['pps']:.2f}× "
                     f"{vx.label}'s packets/s.")
        out.append((text, facts))
    return out
