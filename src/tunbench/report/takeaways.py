"""Take-aways computed from a campaign: every sentence is built from its numbers, and only
when the data supports it. A share or multiple of native is the paired per-round estimate
the tables show (stats.Row.share, report/decide.py); two methods, or a method and native,
are called different, equivalent or undecided by decide's rule. Other figures (absolute
means) differ only when their 95% confidence intervals do not overlap.
"""

from __future__ import annotations

from typing import Any

from . import cores, data, hops, peers, stats, wire
from .data import Campaign, Scenario
from .sentences import Takeaway, _single, count, metric_name, num, times, unit, where
from .vs_native import cpu_per_gbit, share_of_native

# the sentence pieces live in sentences.py (the modules whose take-aways compute() gathers use
# them too); these names stay importable from here
__all__ = ["Takeaway", "compute", "count", "merge_sweeps", "metric_name", "num", "times",
           "unit", "where"]


def jumbo(c: Campaign) -> list[Takeaway]:
    out = []
    for wl in c.workloads():
        mtus = c.mtus(wl)
        metric = data.headline_metric(c, wl)
        if len(mtus) < 2 or metric is None:
            continue
        lo, hi = mtus[0], mtus[-1]
        for off in dict.fromkeys(s[2] for s in c.scenarios() if s[0] == wl):
            a = {r.tunnel: r for r in c.rows if (r.workload, r.mtu, r.offloads, r.metric)
                 == (wl, lo, off, metric)}
            b = {r.tunnel: r for r in c.rows if (r.workload, r.mtu, r.offloads, r.metric)
                 == (wl, hi, off, metric)}
            tuns = [t for t in c.tunnels() if t in a and t in b]
            if len(tuns) < 2:
                continue
            sign = 1 if a[tuns[0]].higher_is_better else -1
            rank_a = sorted(tuns, key=lambda t: -sign * a[t].stats.mean)
            rank_b = sorted(tuns, key=lambda t: -sign * b[t].stats.mean)
            facts: dict[str, Any] = {"workload": wl, "mtus": (lo, hi), "rank_low": rank_a,
                                     "rank_high": rank_b, "metric": metric}
            flips = [(x, y) for i, x in enumerate(rank_a) for y in rank_a[i + 1:]
                     if rank_b.index(x) > rank_b.index(y)]
            sig = [(x, y) for x, y in flips if not data.overlap(a[x].stats, a[y].stats)
                   and not data.overlap(b[x].stats, b[y].stats)]
            rk = f"{' > '.join(rank_a)} at MTU {lo}"
            if sig:
                x, y = sig[0]
                text = (f"Jumbo frames change the ranking in {wl}: {x} beats {y} at MTU {lo} "
                        f"({num(a[x].stats.mean)} vs {num(a[y].stats.mean)} "
                        f"{unit(c, metric, a[x].unit)}) but "
                        f"{y} beats {x} at MTU {hi} ({num(b[y].stats.mean)} vs "
                        f"{num(b[x].stats.mean)}).")
                facts["change"] = "significant"
            elif flips:
                x, y = flips[0]
                text = (f"In {wl}, the order of {x} and {y} by {metric_name(c, metric)} flips "
                        f"between MTU "
                        f"{lo} and {hi}, but their 95% confidence intervals overlap at "
                        "least at one MTU, so the ranking change is not significant.")
                facts["change"] = "not-significant"
            else:
                text = (f"Jumbo frames do not change the ranking by {metric_name(c, metric)} in {wl} "
                        f"({rk}, same at MTU {hi}).")
                facts["change"] = "none"
            shares = []
            for t in tuns:
                if c.kind_of(t) == "native":
                    continue
                pa, pb = a[t].pct_of_native, b[t].pct_of_native   # paired per round
                if pa is not None and pb is not None and a[t].higher_is_better:
                    shares.append(f"{t} keeps {pa:.1f}% of native at MTU {lo} and {pb:.1f}% "
                                  f"at MTU {hi}")
                elif pa is not None and pb is not None:
                    shares.append(f"{t} is at {times(pa)} native at MTU {lo} and {times(pb)} "
                                  f"at MTU {hi}")
                    facts.setdefault("shares", {})[t] = (pa, pb)
            if shares:
                text += " Against native: " + "; ".join(shares) + "."
            out.append(Takeaway("jumbo", text, facts))
    return out


def scaling(c: Campaign) -> list[Takeaway]:
    out = []
    for sw in data.sweeps(c):
        rates = [m for m in sw.points if data.is_rate_unit(sw.units.get(m, ""))]
        if not rates or sw.over == "tunnel":   # scale_out() speaks for tunnel sweeps
            continue
        metric = rates[0]
        u, name = unit(c, metric, sw.units[metric]), metric_name(c, metric)
        for tun, pts in sw.points[metric].items():
            xs = sorted(pts)
            if len(xs) < 3:
                continue
            summ = {x: stats.summarize(pts[x]) for x in xs}
            peak = max(xs, key=lambda x: summ[x].mean)
            last = xs[-1]
            what = f"{tun} (encrypting)" if c.encrypts(tun) else tun
            facts = {"workload": sw.workload, "tunnel": tun, "peak_x": peak,
                     "peak": summ[peak].mean, "last_x": last, "last": summ[last].mean}
            if peak == last:
                text = (f"{what} keeps scaling up to {count(last, sw.param)}: {name} grows from "
                        f"{num(summ[xs[0]].mean)} to {num(summ[last].mean)} {u}.")
                facts["stops"] = False
            elif _single(summ[peak], summ[last]):
                text = (f"{what} peaks at {count(peak, sw.param)} ({num(summ[peak].mean)} {u}) "
                        f"and is at {num(summ[last].mean)} {u} at {last} "
                        f"({100 * summ[last].mean / summ[peak].mean:.0f}% of its peak); one run "
                        "each: no confidence interval, significance not tested.")
                facts["stops"] = None
            elif data.overlap(summ[peak], summ[last]):
                text = (f"{what} levels off after {count(peak, sw.param)} ({num(summ[peak].mean)} "
                        f"{u}); at {last} it is indistinguishable "
                        f"({num(summ[last].mean)} {u}).")
                facts["stops"] = True
            else:
                text = (f"{what} stops scaling at {count(peak, sw.param)}: {name} peaks at "
                        f"{num(summ[peak].mean)} {u} and falls to {num(summ[last].mean)} "
                        f"{u} at {last}.")
                facts["stops"] = True
            out.append(Takeaway("scaling", text, facts))
    return out


def scale_out(c: Campaign) -> list[Takeaway]:
    """Encryption scale-out: a tunnel built N times with flows spread by ECMP (tunnels=N).
    The scaling factor is the rate at N over the rate at the sweep's smallest N; it is called
    a gain only when the two 95% CIs do not overlap. CPU busy at both ends says whether the
    extra tunnels found idle cores or only shared the same ones."""
    out = []
    for sw in data.sweeps(c):
        rates = [m for m in sw.points if data.is_rate_unit(sw.units.get(m, ""))]
        if sw.over != "tunnel" or not rates:
            continue
        metric = data.headline_metric(c, sw.workload)
        metric = metric if metric in rates else rates[0]
        u, name = unit(c, metric, sw.units[metric]), metric_name(c, metric)
        for tun, pts in sw.points[metric].items():
            xs = sorted(pts)
            if len(xs) < 2:
                continue
            summ = {x: stats.summarize(pts[x]) for x in xs}
            first = summ[xs[0]]
            if not first.mean:
                continue
            factors = {x: summ[x].mean / first.mean for x in xs}
            items = ", ".join(f"×{factors[x]:.2f} at {x} ({num(summ[x].mean)} {u})"
                              for x in xs[1:])
            best = max(xs, key=lambda x: summ[x].mean)
            text = (f"In {sw.workload}, {tun} over N ECMP tunnels: {name} {num(first.mean)} "
                    f"{u} with {xs[0]}; {items}")
            facts: dict[str, Any] = {"workload": sw.workload, "tunnel": tun, "metric": metric,
                                     "factors": factors, "best_x": best}
            if _single(summ[best], first):
                text += "; one run each: no confidence interval, significance not tested"
                facts["scales"] = None
            elif best == xs[0]:
                text += f"; more tunnels bring nothing: {xs[0]} is the best"
                facts["scales"] = False
            elif data.overlap(summ[best], first):
                text += (f"; the gain at {best} is not significant with these repeats (95% CIs "
                         f"of {best} and {xs[0]} overlap)")
                facts["scales"] = False
            else:
                text += (f"; the gain at {best} is significant (×{factors[best]:.2f}, "
                         f"{100 * factors[best] / best * xs[0]:.0f}% of linear)")
                facts["scales"] = True
            cpu = sw.points.get("cpu_busy", {}).get(tun, {})
            if xs[0] in cpu and best in cpu:
                lo, hi = (stats.summarize(cpu[x]).mean for x in (xs[0], best))
                text += f". CPU busy {lo:.0f}% with {xs[0]}, {hi:.0f}% with {best}"
                facts["cpu"] = (lo, hi)
                if min(lo, hi) >= 90:
                    text += " (every core full at both counts)"
            dp = sw.points.get(data.DATAPATH_CPU, {}).get(tun, {})
            if xs[0] in dp and best in dp:
                lo, hi = (stats.summarize(dp[x]).mean for x in (xs[0], best))
                text += (f"; its datapath daemons used {lo:.0f}% of one core with {xs[0]} and "
                         f"{hi:.0f}% with {best} (both sites)")
                facts["datapath_cpu"] = (lo, hi)
            out.append(Takeaway("scale-out", text + ".", facts))
    return out


def goodput_on_wire(c: Campaign) -> list[Takeaway]:
    """Per scenario: each tunnel's goodput and what it puts on the wire (full segments in
    outer IP packets; see report/wire.py), and the share of wire bytes that is goodput, most
    efficient first. A swept workload gets it once (the share does not depend on streams)."""
    by_scen: dict[Scenario, list[wire.Wire]] = {}
    seen_sweeps: set[tuple[str, int, str]] = set()
    for w in wire.per_tunnel(c):
        point = c.sweep_point(w.scenario[0])
        key = (point[0] if point else w.scenario[0], w.scenario[1], w.scenario[2])
        if point and key in seen_sweeps and w.scenario not in by_scen:
            continue
        seen_sweeps.add(key)
        by_scen.setdefault(w.scenario, []).append(w)
    out = []
    for scen, ws in by_scen.items():
        ws.sort(key=lambda w: -w.efficiency)
        items = "; ".join(f"{w.tunnel} {num(w.goodput)} → {num(w.on_wire)} Mbit/s "
                          f"({100 * w.efficiency:.1f}% of the wire is goodput: "
                          f"{w.mss} of {w.frame} bytes)" for w in ws)
        text = (f"In {where(c, scen)}, goodput against the wire (full TCP segments in the "
                f"outer IP packets the tunnel sends): {items}.")
        base = next((w for w in ws if c.kind_of(w.tunnel) == "native"), None)
        if base is not None and len(ws) > 1:
            worst = ws[-1]
            text += (f" {worst.tunnel}'s headers take {100 * (base.efficiency - worst.efficiency):.1f}"
                     " points more of the wire than native's.")
        out.append(Takeaway("on-wire", text, {
            "scenario": scen, "efficiency": {w.tunnel: w.efficiency for w in ws},
            "on_wire": {w.tunnel: w.on_wire for w in ws},
            "goodput": {w.tunnel: w.goodput for w in ws}}))
    return out


def latency(c: Campaign) -> list[Takeaway]:
    """One sentence per scenario: what each tunnel adds to the median latency over native,
    largest first; those whose 95% CIs overlap native's are named together."""
    out = []
    for scen in c.scenarios():
        names = [m for m in dict.fromkeys(r.metric for r in c.rows if r.workload == scen[0])
                 if m.endswith("_p50") or m in ("rtt_avg", "latency_avg", "latency_mean")]
        for metric in names[:1]:
            base = c.native_row(scen, metric)
            if base is None:
                continue
            rows = [r for r in (c.row(t, scen, metric) for t in c.tunnels())
                    if r is not None and r.kind != "native"]
            if not rows:
                continue
            rows.sort(key=lambda r: -r.stats.mean)
            differ, same, single = [], [], False
            deltas: dict[str, float] = {}
            for r in rows:
                d = r.stats.mean - base.stats.mean
                deltas[r.tunnel] = d
                if _single(r.stats, base.stats):
                    single = True
                elif data.overlap(r.stats, base.stats):
                    same.append(r.tunnel)
                    continue
                differ.append(f"{r.tunnel} {'adds' if d > 0 else 'saves'} {num(abs(d))}")
            parts = []
            if differ:
                parts.append(", ".join(differ) + f" {unit(c, metric, base.unit)}")
            if same:
                parts.append(f"{' and '.join(same)} {'is' if len(same) == 1 else 'are'} "
                             "indistinguishable from native (95% CIs overlap)")
            text = (f"In {where(c, scen)}, {metric_name(c, metric)} against native's "
                    f"{num(base.stats.mean)} {unit(c, metric, base.unit)}: "
                    + "; ".join(parts) + ".")
            if single:
                text += " One run each: no confidence interval, significance not tested."
            out.append(Takeaway("latency", text, {"scenario": scen, "metric": metric,
                                                  "deltas": deltas, "same": same}))
    return out


def one_core(c: Campaign) -> list[Takeaway]:
    """Where a tunnel is bound by one core: a recorded thread at a full core, or the busiest
    core near full while another has room; naming the process whose thread used it."""
    out = []
    for b in cores.bottlenecks(c):
        on = f" on its {b.end}" if b.site else ""
        cores_txt = (f"the busiest core averaged {b.busiest:.0f}% busy"
                     + (f" ({b.softirq:.0f}% of it irq + softirq)" if b.softirq >= 20 else "")
                     + f", the least busy {b.least:.0f}%")
        if b.signature == "thread":
            text = (f"In {where(c, b.scenario)}, {b.tunnel} is bound by one core{on}: "
                    f"{b.process}'s "
                    f"busiest thread ran at {b.process_pct:.0f}% of a core, as much as one "
                    f"thread can ({cores_txt}).")
        else:
            who = (f"; its user: {b.process}, whose busiest thread ran at "
                   f"{b.process_pct:.0f}% of a core" if b.process else
                   "; no recorded process came near a full core (kernel work: softirq or "
                   "kworkers)")
            text = (f"In {where(c, b.scenario)}, {b.tunnel} is bound by one core{on}: "
                    f"{cores_txt}{who}.")
        text += (" More cores do not help it; spreading its work does (more tunnels with "
                 "ECMP, tunnels=N, or more flows where the datapath is multi-threaded).")
        out.append(Takeaway("one-core", text, {
            "scenario": b.scenario, "tunnel": b.tunnel, "signature": b.signature,
            "busiest": b.busiest, "least": b.least, "softirq": b.softirq,
            "process": b.process, "process_pct": b.process_pct, "site": b.site}))
    return out


# from this share of a method's retransmitted segments D-SACKed by the receiver, its
# retransmits are called reordering: mr20's native cases, 93 % (docs/methodology.md)
REORDERED_PCT = 50.0


def reordered(c: Campaign) -> list[Takeaway]:
    """Per scenario, the methods whose TCP retransmits were mostly spurious (the receiver
    already had the segments: reordering on the path, not loss), native first: the figure
    then moves with the reordering from case to case, and so does every share of it."""
    out = []
    for scen in c.scenarios():
        rows = [r for r in (c.row(t, scen, "spurious_retransmits") for t in c.tunnels())
                if r is not None and r.stats.mean >= REORDERED_PCT]
        if not rows:
            continue
        rows.sort(key=lambda r: (not stats.is_reference(r), -r.stats.mean))
        named = ", ".join(f"{r.tunnel} {r.stats.mean:.0f}%" for r in rows)
        text = (f"In {where(c, scen)}, most retransmitted TCP segments were spurious (the "
                f"receiver already had them: reordered, not lost): {named}. Such a flow's "
                "throughput moves with the reordering from case to case")
        if stats.is_reference(rows[0]):
            text += (", and so does every share of native; on veth a flow's packets can "
                     "leave its sender from two CPUs (docs/methodology.md, \"Native's "
                     "retransmits on veth\")")
        out.append(Takeaway("reordered", text + ".", {
            "scenario": scen, "spurious_pct": {r.tunnel: r.stats.mean for r in rows}}))
    return out


def noisy(c: Campaign) -> list[Takeaway]:
    rows = [r for r in c.rows if r.noisy]
    if not rows:
        return []
    names = ", ".join(f"{r.tunnel} {c.display(r.metric)}"
                      + ("" if len(c.mtus()) < 2 else f" at MTU {r.mtu}")
                      + f" (CV {100 * (r.stats.cv or 0):.0f}%)" for r in rows[:8])
    more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
    return [Takeaway("noisy", f"{len(rows)} of {len(c.rows)} figures are noisy (coefficient "
                     f"of variation above {stats.NOISY_CV:.0%}): {names}{more}. Treat their "
                     "differences with care; more repeats or longer runs narrow the CIs.",
                     {"count": len(rows), "total": len(c.rows)})]


def _merged(c: Campaign, topic: str, group: list[tuple[int, Takeaway]], where_txt: str,
            param: str) -> Takeaway:
    """One sentence for a topic over every value of a sweep, from the per-value facts."""
    by_value = {x: t.facts for x, t in sorted(group, key=lambda g: g[0])}
    single = any(t.facts.get("single") for _, t in group)
    if topic == "share-of-native":
        metric = next(iter(by_value.values()))["metric"]
        hib = next(iter(by_value.values())).get("higher_is_better", True)
        items = ", ".join(f"{x}: {f['best']} " + (f"{f['pct']:.1f}%" if hib else
                                                  f"{times(f['pct'])} native")
                          for x, f in by_value.items())
        lead = (f"the tunnel keeping the highest share of native {metric_name(c, metric)}"
                if hib else f"the tunnel closest to native {metric_name(c, metric)}")
        text = f"In {where_txt}, {lead}, by {param}: {items}."
    else:  # cpu-per-gbit: each tunnel's range of multiples of native's CPU per Gbit/s
        ranges: dict[str, list[float]] = {}
        for f in by_value.values():
            for tun, ratio in f["ratios"].items():
                ranges.setdefault(tun, []).append(ratio)
        items = ", ".join(f"{tun} {min(r):.2f}-{max(r):.2f}×" for tun, r in
                          sorted(ranges.items(), key=lambda kv: -max(kv[1])))
        xs = list(by_value)
        end = next(iter(by_value.values())).get("end")
        where_txt += f", on {end}" if end else ""
        text = (f"In {where_txt}, CPU per Gbit/s as a multiple of native's over {param} "
                f"{xs[0]}..{xs[-1]} (lowest-highest): {items}.")
    if single:
        text += " One run each: no confidence interval, significance not tested."
    return Takeaway(topic, text, {"sweep": param, "by_value": by_value})


def merge_sweeps(c: Campaign, takes: list[Takeaway]) -> list[Takeaway]:
    """A swept workload (parallel-streams at 1..512 streams) gets one share-of-native and one
    CPU sentence for the whole sweep instead of one per value; the per-value facts stay."""
    Key = tuple[str, str, str, int, str]   # topic, base workload, parameter, MTU, offloads
    groups: dict[Key, list[tuple[int, Takeaway]]] = {}
    key_of: dict[int, Key] = {}
    for t in takes:
        scen = t.facts.get("scenario")
        if scen is None or t.topic not in ("share-of-native", "cpu-per-gbit"):
            continue
        point = c.sweep_point(scen[0])
        if point:
            # one sentence per sweep and per end (sites on separate hosts)
            k: Key = (f"{t.topic}|{t.facts.get('end') or ''}", point[0], point[1], scen[1],
                      scen[2])
            groups.setdefault(k, []).append((point[2], t))
            key_of[id(t)] = k
    out: list[Takeaway] = []
    for t in takes:
        found = key_of.get(id(t))
        if found is None or len(groups[found]) < 2:
            out.append(t)
        elif groups[found][0][1] is t:   # the sweep's sentence stands where its first value was
            topic, base, param, mtu, off = found
            out.append(_merged(c, topic.split("|")[0], groups[found],
                               where(c, (base, mtu, off)), param))
    return out


def agg_tradeoff(c: Campaign) -> list[Takeaway]:
    """An aggregating kind's flush-timeout trade-off against its baseline (agg: vxlan;
    report/tradeoff.py)."""
    from . import tradeoff
    return [Takeaway("agg-tradeoff", text, facts) for text, facts in tradeoff.takeaway_texts(c)]


def compute(c: Campaign) -> list[Takeaway]:
    return merge_sweeps(c, share_of_native(c) + cpu_per_gbit(c) + jumbo(c) + scaling(c)
                        + scale_out(c) + peers.compute(c) + goodput_on_wire(c) + latency(c)
                        + agg_tradeoff(c) + one_core(c) + reordered(c) + noisy(c)
                        + hops.takeaways(c.cases))
