"""The flush-timeout trade-off of an aggregating tunnel (agg, docs/agg.md): what waiting for
company buys on the wire and costs in latency, per flush timeout, against native and the
kind's baseline (agg: kernel VXLAN) of the same campaign. Pure over the typed case records;
drawn by figures/tradeoff.py, shown as a table here and said in one take-away.

Which kinds aggregate is what their cases recorded (the tunnel record's `aggregation`: the
flush-timeout parameter and the baseline kind, declared by the driver, TunnelDriver.aggregates),
never a kind name written here. A campaign has the trade-off when the ok cases of an
aggregating kind ran at two or more flush timeouts (0 = no aggregation) and recorded the
figure's metrics. Per variant (each flush timeout, native, the baseline), means over repeats
of:

- wire packets per inner packet and wire bytes per inner byte, CPU per Mpps (the host's, and
  the tunnel daemon's own, e.g. tbagg): the loss search's latency-under-load trial
  (`wire_pkts_per_inner`,
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

from ..results.records import CaseRecord
from . import stats
from .data import Campaign

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
    flush_us: int | None          # the aggregating kind only
    values: dict[str, float] = field(default_factory=dict)   # METRICS key -> mean
    n: dict[str, int] = field(default_factory=dict)          # repeats behind each mean


@dataclass
class Tradeoff:
    kind: str                     # the aggregating kind ('agg')
    daemon: str                   # its datapath daemon as the cases recorded it ('tbagg')
    mtu: int
    offloads: str
    size: str | None              # the loss search's packet size (IP bytes) the figures are at
    load_pct: float | None        # where wire/CPU/loaded latency were measured, % of threshold
    goal: str | None              # rfc2544 or ndr: the threshold the pps are at
    threshold_pct: float | None   # the loss threshold of that goal, % of packets
    rtt: str | None               # the latency workload's metric behind added RTT
    aggs: list[Variant]           # by flush_us
    native: Variant | None
    baseline: Variant | None      # the kind the aggregating one declared (agg: vxlan)

    @property
    def refs(self) -> list[Variant]:
        return [v for v in (self.native, self.baseline) if v is not None]

    def loaded(self, key: str) -> str:
        """The loaded one-way latency's key beside an added-RTT key (add_p50 -> add_p50_load)."""
        return f"{key}_load"


def _raw(docs: list[CaseRecord], size: str | None, load: float | None, goal: str | None,
         rtt: str | None) -> dict[str, list[float]]:
    """Values per repeat of one variant (before averaging), keyed like METRICS, with the
    absolute latencies under lat_p50/lat_p99 (RTT) and lat_p50_load/lat_p99_load."""
    out: dict[str, list[float]] = {}
    for d in docs:
        for rec in d.metrics.values():
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


def _choose(docs: list[CaseRecord]) -> tuple[str | None, float | None, str | None,
                                                  str | None]:
    """(size, load_pct, goal, rtt metric) the aggregating kind's cases recorded: the first size
    with wire figures, their highest load, rfc2544 before ndr, udp_rtt before tcp_rtt."""
    sizes: dict[str, set[Any]] = {}
    goals: set[str] = set()
    rtts: set[str] = set()
    for d in docs:
        for rec in d.metrics.values():
            if rec.base in COST_BASES and rec.value is not None and "size" in rec.dims:
                sizes.setdefault(str(rec.dims["size"]), set()).add(rec.dims.get("load_pct"))
            if rec.base == "rate_pps" and rec.value is not None:
                goals.add(str(rec.dims.get("goal")))
            if rec.base in RTTS and rec.value is not None:
                rtts.add(rec.base)
    for d in docs if not sizes else ():   # a campaign from before the wire figures
        for rec in d.metrics.values():
            if rec.base == "rate_pps" and rec.value is not None and "size" in rec.dims:
                sizes.setdefault(str(rec.dims["size"]), set())
    size = next(iter(sizes), None)
    loads = [x for x in sizes.get(size or "", ()) if isinstance(x, (int, float))]
    goal = next((g for g in ("rfc2544", "ndr") if g in goals), None)
    rtt = next((r for r in RTTS if r in rtts), None)
    return size, (max(loads) if loads else None), goal, rtt


def _threshold(docs: list[CaseRecord], goal: str | None) -> float | None:
    for d in docs:
        if d.workload.base != "loss-search":
            continue
        p = d.workload.params
        key = {"rfc2544": "loss_threshold_pct", "ndr": "ndr_loss_pct"}.get(goal or "")
        if key and isinstance(p.get(key), (int, float)):
            return float(p[key])
    return None


def _daemon(docs: list[CaseRecord], kind: str) -> str:
    """The aggregating kind's datapath daemon as its cases' CPU record names it ('tbagg')."""
    for d in docs:
        for label, e in (d.cpu.get("processes") or {}).items():
            comm = str(e.get("comm") or "") if isinstance(e, dict) else ""
            if label.startswith("datapath") and comm:
                return comm
    return f"{kind} daemon"


def find(c: Campaign) -> list[Tradeoff]:
    """One trade-off per aggregating kind and (underlay MTU, offload variant) whose cases ran
    at >= 2 flush timeouts."""
    out = []
    groups: dict[tuple[int, str], list[CaseRecord]] = {}
    for d in c.ok:
        groups.setdefault((d.mtu, d.offloads), []).append(d)
    for (mtu, off), docs in groups.items():
        kinds = dict.fromkeys(d.tunnel.kind for d in docs if d.tunnel.flush_us is not None)
        for kind in kinds:
            t = _tradeoff(kind, mtu, off, docs)
            if t is not None:
                out.append(t)
    return out


def _tradeoff(kind: str, mtu: int, off: str, docs: list[CaseRecord]) -> Tradeoff | None:
    aggs = [d for d in docs if d.tunnel.kind == kind and d.tunnel.flush_us is not None]
    if len({d.tunnel.flush_us for d in aggs}) < 2:
        return None
    agg = aggs[0].tunnel.aggregation
    base_kind = agg.baseline if agg else None
    size, load, goal, rtt = _choose(aggs)
    meta: dict[str, tuple[str, int | None]] = {}
    for d in docs:
        if d.tunnel.kind in (kind, "native", base_kind):
            meta.setdefault(d.tunnel.label, (d.tunnel.kind, d.tunnel.flush_us
                                             if d.tunnel.kind == kind else None))
    raw = {lab: _raw([d for d in docs if d.tunnel.label == lab], size, load, goal, rtt)
           for lab in meta}
    native = next((lab for lab, (k, _) in meta.items() if k == "native"), None)
    base = {k: stats.summarize(v).mean for k, v in (raw.get(native or "") or {}).items()}
    variants: dict[str, Variant] = {}
    for lab, (k, flush) in meta.items():
        v = Variant(lab, k, flush)
        for key, vals in raw[lab].items():
            v.values[key] = stats.summarize(vals).mean
            v.n[key] = len(vals)
        for q in ("p50", "p99"):
            for suffix in ("", "_load"):
                if f"lat_{q}{suffix}" in v.values and f"lat_{q}{suffix}" in base:
                    v.values[f"add_{q}{suffix}"] = (v.values[f"lat_{q}{suffix}"]
                                                    - base[f"lat_{q}{suffix}"])
        variants[lab] = v
    ags = sorted((v for v in variants.values() if v.kind == kind),
                 key=lambda v: (v.flush_us or 0, v.label))
    ref = next((v for v in variants.values() if base_kind and v.kind == base_kind), None)
    return Tradeoff(kind, _daemon(aggs, kind), mtu, off, size, load, goal,
                    _threshold(docs, goal), rtt, ags, variants.get(native or ""), ref)


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
            ("dp_cpu", f"{t.daemon} CPU per Mpps (cores, at {load})")]
    rtt = t.rtt or "RTT"
    for q in ("p50", "p99"):
        cols.append((f"add_{q}", f"added {q} µs ({rtt} idle)"))
        cols.append((f"add_{q}_load", f"added {q} µs (one-way at {load})"))
    return cols


def rows(t: Tradeoff) -> list[tuple[str, list[str]]]:
    """(variant name, cells) in figure order: the aggregating kind by flush timeout, then
    native and the baseline; each value with its ratio to the baseline's where the baseline
    has it (pps, wire, CPU)."""
    out = []
    for v in [*t.aggs, *t.refs]:
        name = v.label + (f" (flush {v.flush_us} µs)" if v.flush_us is not None else "")
        cells = []
        for key, _ in columns(t):
            val = v.values.get(key)
            txt = fmt(key, val)
            bl = t.baseline
            ref = bl.values.get(key) if bl is not None else None
            if bl is not None and val is not None and ref and not key.startswith("add_") \
                    and v is not bl:
                txt += f" ({val / ref:.2f}× {bl.label})"
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
            f"<h3 id={html.escape(t.kind)}-tradeoff>{html.escape(t.kind)} flush-timeout "
            f"trade-off (MTU {t.mtu}"
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
            f"any other user of the host share it), and {t.daemon}'s own (both sites). Added "
            "latency: over native of the same run, "
            f"{t.rtt or 'RTT'} of the latency workload (idle ping-pong: each message waits "
            f"up to the flush timeout each way) and the loss search's one-way latency at "
            f"{load}. flush 0 = no aggregation.")


# -- the take-away -------------------------------------------------------------------------

def takeaway_texts(c: Campaign) -> list[tuple[str, dict[str, Any]]]:
    """'agg at 50 µs: 1.58× vxlan's packets/s at 0.1% loss, 0.66× its wire bytes per inner
    byte, +225 µs p50 RTT over native (vxlan +20)', for the shortest aggregating timeout whose
    packet rate is within KNEE of the sweep's best, when the baseline's figures are there."""
    out = []
    for t in find(c):
        vx = t.baseline
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
        facts: dict[str, Any] = {"workload": f"{t.kind}-tradeoff", "flush_us": best.flush_us,
                                 "label": best.label, "kind": t.kind,
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
        text = (f"{t.kind} at {best.flush_us} µs (the shortest flush timeout within "
                f"{KNEE:.0%} of the best packet rate of the sweep; MTU {t.mtu}): "
                + ", ".join(parts) + ".")
        zero = next((v for v in t.aggs if v.flush_us == 0 and v.values.get("pps")), None)
        if zero is not None:
            text += (f" Without aggregation (flush 0): {zero.values['pps'] / vx.values['pps']:.2f}× "
                     f"{vx.label}'s packets/s.")
        out.append((text, facts))
    return out
