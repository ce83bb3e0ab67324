"""Per-hop figures of chain campaigns (chain/hops.py records them in each case's `chain`
section, the typed record's `chain`): the path with each hop's namespace, the routers the TTL counted, the latency each
hop adds, and a per-hop drop table naming the hop where packets were lost. Campaigns without
a chain show nothing."""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console
from rich.table import Table

from ..results.records import CaseRecord
from .sentences import Takeaway


def chained(cases: list[CaseRecord]) -> list[CaseRecord]:
    return [r for r in cases if r.ok and r.chain.get("drops")]


def _label(r: CaseRecord) -> str:
    return f"{r.tunnel.label} / {r.workload.label} r{r.repeat}"


def loss_cell(row: dict[str, Any]) -> str:
    """'1,234 (qdisc 1,234)': what a place lost, and which counters say where."""
    from ..chain.hops import loss_of
    n = loss_of(row)
    parts = [f"{k} {row[f'{k}_drops']:,}" for k in ("qdisc", "policy", "if")
             if row.get(f"{k}_drops")]
    return f"{n:,}" + (f" ({', '.join(parts)})" if parts else "")


def print_table(console: Console, cases: list[CaseRecord]) -> None:
    """One row per chain case: the places in path order, what each lost, the bottleneck."""
    docs = chained(cases)
    if not docs:
        return
    places = [r["place"] for r in docs[0].chain["drops"]]
    table = Table(title=f"per-hop drops - {docs[0].chain.get('path')}")
    table.add_column("case")
    for p in places:
        table.add_column(p, justify="right")
    table.add_column("routers (TTL)", justify="right")
    table.add_column("loss starts at")
    for d in docs:
        ch = d.chain
        by = {r["place"]: r for r in ch["drops"]}
        probe = ch.get("probe") or {}
        table.add_row(_label(d), *[loss_cell(by[p]) if p in by else "–" for p in places],
                      str(probe.get("routers", "–")), ch.get("bottleneck") or "no hop")
    console.print(table)


def section_html(cases: list[CaseRecord]) -> str:
    """The report's chain section ('' for a campaign without a chain)."""
    docs = chained(cases)
    if not docs:
        return ""
    first = docs[0].chain
    esc = html.escape
    diagram = " → ".join(
        ["site a"] + [f"{h['name']} ({h['kind']}, netns {h['netns']}"
                      + (f" on {h['host']}" if h.get("host") else "") + ")"
                      for h in first["hops"]]
        + ["site b"])
    places = [r["place"] for r in first["drops"]]
    head = "".join(f"<th>{esc(p)}</th>" for p in places)
    rows = []
    for d in docs:
        ch = d.chain
        by = {r["place"]: r for r in ch["drops"]}
        cells = "".join(f"<td>{esc(loss_cell(by[p]))}</td>" if p in by else "<td>–</td>"
                        for p in places)
        probe = ch.get("probe") or {}
        rows.append(f"<tr><td class=l>{esc(_label(d))}</td>{cells}"
                    f"<td>{esc(str(probe.get('routers', '–')))}</td>"
                    f"<td class=l>{esc(ch.get('bottleneck') or 'no hop')}</td></tr>")
    added = first.get("probe", {}).get("added_us") or {}
    lat = ", ".join(f"{esc(k)} {v:g} µs" for k, v in added.items() if v is not None)
    return (f"<h2 id=chain>Chain: per-hop figures</h2><p>{esc(diagram)}</p>"
            "<p>Packets each place lost during the workload (a hop: what entered and did not "
            "leave, or its explicit drop counters if more; sites: their own drops), the "
            "routers the TTL counted, and where loss starts (docs/chains.md).</p>"
            f"<table><tr><th class=l>case</th>{head}<th>routers (TTL)</th>"
            f"<th class=l>loss starts at</th></tr>{''.join(rows)}</table>"
            f"<p>Latency added per hop (idle, median of 20 pings, first case): "
            f"{lat or '–'}.</p>")


# ---- the chain diagram, chain vs direct, where loss starts ---------------------------------
# metrics set side by side when a campaign measured the chain and direct (chain direct = true)
COMPARED = ("throughput", "rfc2544_pps_", "ndr_pps_", "pdr_pps_")
PATH_FIGURES = ("rtt_avg", "hops")   # seed 004's path figures (ping): the RTT and hops added


def _chain_doc(cases: list[CaseRecord]) -> CaseRecord | None:
    return next((r for r in cases if r.testbed.get("chain")), None)


def diagram(cases: list[CaseRecord]) -> list[tuple[str, str, str, str]]:
    """The chain as rows (place, kind, where, what): each hop's namespace, what it does
    (rules, rate), and which tunnel the gateways terminate between them (pure)."""
    doc = _chain_doc(cases)
    if doc is None:
        return []
    tbc = doc.testbed["chain"]
    sites = doc.testbed.get("sites") or {}
    gw = tbc.get("gateway_tunnel") or {}
    carrier = tbc.get("carrier") or {}
    rows = [("a", "site", _where(sites.get("a") or {}),
             f"sends; MTU {tbc.get('segment_mtus', ['?'])[0]}")]
    for h in tbc.get("hops", []):
        what = _what(h, gw)
        if carrier and h["kind"] == "wan":
            to = (carrier.get("ends") or {}).get("b") or {}
            what += (f"; crosses to {to.get('host', '?')} over a {carrier.get('kind')} "
                     f"carrier (-{carrier.get('overhead')} B: MTU {carrier.get('mtu')})")
        rows.append((h["name"], h["kind"], _where(h), what))
    mtus = tbc.get("segment_mtus") or ["?"]
    rows.append(("b", "site", _where(sites.get("b") or {}),
                 f"receives; MTU {mtus[-1]}"))
    return rows


def _where(place: dict[str, Any]) -> str:
    """A place's namespace, with its host when the chain runs between hosts."""
    ns = str(place.get("netns") or "–")
    host = place.get("host")
    return f"{host}: {ns}" if host and host != "local" else ns


def _what(hop: dict[str, Any], gw: dict[str, Any]) -> str:
    p = hop.get("params") or {}
    kind = hop["kind"]
    if kind == "gateway":
        names = gw.get("gateways") or []
        peer = next((n for n in names if n != hop["name"]), "?")
        label = gw.get("label") or p.get("tunnel", "?")
        enc = ", encrypts" if gw.get("encrypts") else ""
        srh = ""
        if gw.get("kind") == "srv6":   # the segment list this gateway puts in its SRH
            segs = (gw.get("srv6") or {}).get(
                "segments_to_b4" if names and names[0] == hop["name"] else "segments_to_a4")
            srh = f", SRH [{', '.join(segs or [])}]"
        return (f"{label} tunnel to {peer}{enc}{srh}; inner MTU {gw.get('inner_mtu', '?')} "
                f"over WAN MTU {gw.get('wan_mtu', '?')}")
    if kind == "router" and p.get("srv6_end"):
        return "SRv6 transit End SID (outer hop limit - 1; inner TTL untouched)"
    if kind == "firewall":
        return (f"nftables, {p.get('rules', '?')} {p.get('shape', 'linear')} rules"
                + (", stateful" if p.get("stateful") else "")
                + (f", limit {p['limit']}" if p.get("limit") else ""))
    if kind == "wan":
        return "tbf " + str(p.get("rate") or "unshaped") + \
            "".join(f", {k} {p[k]}" for k in ("delay", "jitter", "loss") if p.get(k))
    if kind == "nat":
        return f"nftables {p.get('mode', 'masquerade')}"
    return "forwards (TTL - 1)"


def diagram_line(cases: list[CaseRecord]) -> str:
    """'a -> rtra -> fwa -> gwa =[ipsec (libipsec)]=> wan =[...]=> gwb -> ... -> b'."""
    doc = _chain_doc(cases)
    if doc is None:
        return ""
    tbc = doc.testbed["chain"]
    gw = tbc.get("gateway_tunnel") or {}
    ends = gw.get("gateways") or []
    inside = False
    carrier = tbc.get("carrier") or {}
    out = "a"
    crossing = False
    for h in tbc.get("hops", []):
        arrow = f" ={gw.get('label')}=> " if inside else " -> "
        if crossing:   # the WAN segment between the hosts (inside a gateway tunnel or not)
            arrow = (f" ={gw.get('label')} over {carrier.get('kind')}=> " if inside
                     else f" ~{carrier.get('kind')}~> ")
            crossing = False
        out += arrow + h["name"]
        crossing = bool(carrier) and h["kind"] == "wan"
        if h["name"] in ends:
            inside = not inside
    return out + (f" ~{carrier.get('kind')}~> b" if crossing else " -> b")


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def chain_vs_direct(cases: list[CaseRecord]) -> list[dict[str, Any]]:
    """Per workload and compared metric: the mean direct, through the chain, and the chain's
    share of direct, with n of each and whether a figure is a lower bound (pure)."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for case in cases:
        topo = case.topology
        if not case.ok or topo not in ("direct", "chain"):
            continue
        wlabel = case.workload.label
        for name, m in case.metrics.items():
            if m.value is None or not (name == "throughput" or name in PATH_FIGURES
                                       or name.startswith(COMPARED[1:])):
                continue
            slot = acc.setdefault((wlabel, name), {"unit": m.unit, "direct": [],
                                                   "chain": [], "bound": set()})
            slot[topo].append(m.value)
            if m.bound:
                slot["bound"].add(topo)
    rows = []
    for (wlabel, name), s in acc.items():
        direct, chain = _mean(s["direct"]), _mean(s["chain"])
        rows.append({"workload": wlabel, "metric": name, "unit": s["unit"], "direct": direct,
                     "chain": chain, "n_direct": len(s["direct"]), "n_chain": len(s["chain"]),
                     "bound": sorted(s["bound"]),
                     "pct": (100.0 * chain / direct if direct and chain is not None
                             else None)})
    return rows


def loss_start(cases: list[CaseRecord]) -> dict[str, Any] | None:
    """Where loss starts in the chain: the hop most chain cases name as their bottleneck
    (by the per-hop drop counters), what it is, and how it lost (pure); None without loss."""
    docs = chained(cases)
    named = [d.chain["bottleneck"] for d in docs if d.chain.get("bottleneck")]
    if not named:
        return None
    place = max(dict.fromkeys(named), key=named.count)
    kinds = {h["name"]: h for h in (docs[0].chain.get("hops") or [])}
    rows = [next(r for r in d.chain["drops"] if r["place"] == place) for d in docs
            if d.chain.get("bottleneck") == place]
    from ..chain.hops import loss_of
    worst = max(rows, key=loss_of)
    how = ", ".join(f"{k} drops" for k in ("qdisc", "policy", "if") if worst.get(f"{k}_drops"))
    hop = kinds.get(place) or {}
    return {"place": place, "kind": hop.get("kind", "site"), "cases": len(rows),
            "of": len(docs), "lost": loss_of(worst), "how": how or "in minus out (no drop "
            "counter saw it: a queue inside the hop, e.g. a userspace datapath's)"}


def takeaways(cases: list[CaseRecord]) -> list[Any]:
    """The chain's take-aways: where loss starts, and the chain's share of direct."""
    out = []
    start = loss_start(cases)
    if start is not None:
        what = start["kind"]
        doc = _chain_doc(cases)
        gw = (doc.testbed["chain"].get("gateway_tunnel") or {}) if doc else {}
        if what == "gateway" and gw.get("label"):
            what = f"{what}, {gw['label']}"
        out.append(Takeaway("chain", f"Loss starts at {start['place']} ({what}): the "
                            f"bottleneck in {start['cases']} of {start['of']} chain case(s), "
                            f"up to {start['lost']:,} packets lost there, counted by "
                            f"{start['how']}.", dict(start)))
    rows = {(r["workload"], r["metric"]): r for r in chain_vs_direct(cases)}
    for (wl, metric), r in rows.items():
        hops = rows.get((wl, "hops"))
        if metric != "rtt_avg" or r["direct"] is None or r["chain"] is None:
            continue
        more = ""
        if hops and hops["direct"] is not None and hops["chain"] is not None:
            n = hops["chain"] - hops["direct"]
            more = f", {n:+.0f} hop{'s' if abs(n) != 1 else ''} (from the replies' TTL)"
        unit = _named(cases, metric, r["unit"])[1]
        out.append(Takeaway("chain", f"Through the chain, {wl}'s RTT is {_fmt(r['chain'])} "
                            f"{unit} against {_fmt(r['direct'])} {unit} direct "
                            f"({r['chain'] - r['direct']:+,.0f} {unit}){more}.", dict(r)))
    for r in rows.values():
        if r["pct"] is None or r["metric"] != "throughput" and not r["metric"].startswith(
                ("rfc2544_pps_", "ndr_pps_")):
            continue
        lb = " (direct is a lower bound: the generator's limit)" if "direct" in r["bound"] \
            else ""
        name, unit = _named(cases, r["metric"], r["unit"])
        from . import metrics as catalogue
        name = catalogue.in_sentence(name)
        out.append(Takeaway("chain", f"Through the chain, {r['workload']} {name} is "
                            f"{r['pct']:.1f}% of direct ({_fmt(r['chain'])} vs "
                            f"{_fmt(r['direct'])} {unit}){lb}.", dict(r)))
    return out


def _named(cases: list[CaseRecord], metric: str, unit: str) -> tuple[str, str]:
    """The catalogue's name and unit of a metric key, from the record a case holds."""
    from . import metrics as catalogue
    rec = next((r.metrics[metric] for r in cases if metric in r.metrics), None)
    return catalogue.display_name(metric, rec), catalogue.unit_label(metric, unit, rec)


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}%"


def _cmp_cells(cases: list[CaseRecord], r: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """One chain-vs-direct row as text, for the console and the page alike: workload, the
    metric by the catalogue's name and unit ('Ping RTT, average (µs)', never its key),
    direct, chain (≥: a lower bound) and the chain's share of direct."""
    return (r["workload"], "{} ({})".format(*_named(cases, r["metric"], r["unit"])),
            ("≥" if "direct" in r["bound"] else "") + _fmt(r["direct"]),
            ("≥" if "chain" in r["bound"] else "") + _fmt(r["chain"]), _pct(r["pct"]))


def print_chain(console: Console, cases: list[CaseRecord]) -> None:
    """The chain diagram and chain vs direct on the console (nothing without a chain)."""
    rows = diagram(cases)
    if not rows:
        return
    t = Table(title=f"chain - {diagram_line(cases)}")
    for col in ("place", "kind", "namespace", "what"):
        t.add_column(col)
    for place in rows:
        t.add_row(*place)
    console.print(t)
    cmp = chain_vs_direct(cases)
    if cmp:
        c = Table(title="through the chain vs direct (same run)")
        for col in ("workload", "metric", "direct", "chain", "chain % of direct"):
            c.add_column(col, justify="left" if col in ("workload", "metric") else "right")
        for r in cmp:
            c.add_row(*_cmp_cells(cases, r))
        console.print(c)
    for take in takeaways(cases)[:1]:
        console.print(take.text)


def chain_html(cases: list[CaseRecord]) -> str:
    """The report's chain diagram and chain-vs-direct table ('' without a chain)."""
    rows = diagram(cases)
    if not rows:
        return ""
    esc = html.escape
    body = "".join("<tr>" + "".join(f"<td class=l>{esc(x)}</td>" for x in r) + "</tr>"
                   for r in rows)
    out = (f"<h2 id=chain-diagram>Chain</h2><p><code>{esc(diagram_line(cases))}</code> "
           "(=tunnel=> : between the gateways, inside their tunnel)</p>"
           "<table><tr><th class=l>place</th><th class=l>kind</th><th class=l>namespace</th>"
           f"<th class=l>what</th></tr>{body}</table>")
    cmp = chain_vs_direct(cases)
    if cmp:
        trs = ""
        for r in cmp:   # workload and metric left-aligned, the figures right
            cells = _cmp_cells(cases, r)
            trs += ("<tr>" + "".join(f"<td class=l>{esc(x)}</td>" for x in cells[:2])
                    + "".join(f"<td>{esc(x)}</td>" for x in cells[2:]) + "</tr>")
        out += ("<h3>Through the chain vs direct</h3><p>The same workloads measured without "
                "the chain (the plain two-site testbed) in the same run, means over the "
                "rounds; ≥: a lower bound (the generator's limit, not the path's).</p>"
                "<table><tr><th class=l>workload</th><th class=l>metric</th><th>direct</th>"
                f"<th>chain</th><th>chain % of direct</th></tr>{trs}</table>")
    takes = takeaways(cases)
    if takes:
        out += "<ul>" + "".join(f"<li>{esc(t.text)}</li>" for t in takes) + "</ul>"
    return out
