"""Take-aways that compare tunnels with each other, not only with native: offload variants
against the default, OVS-based tunnels against Linux ones in CPU per Gbit/s, and the
encrypting tunnels by stream count. Each sentence is built from the rows; a difference is
called one only when the two 95% confidence intervals do not overlap.

What a tunnel is comes from the case files: its recorded kind (`ovs-*` is Open vSwitch), and
whether it encrypts as the case recorded it (`case.tunnel.encrypts`; v1 files get it from the
reader's upgrader).
"""

from __future__ import annotations

from typing import Any

from . import data, stats
from .data import Campaign
from .sentences import Takeaway, metric_name, num, unit, where


def _verdict(a: stats.Summary, b: stats.Summary) -> tuple[str, bool | None]:
    if a.n < 2 or b.n < 2:
        return "one run each, significance not tested", None
    if data.overlap(a, b):
        return "within the 95% CIs", False
    return "significant", True


def offload_variants(c: Campaign) -> list[Takeaway]:
    """Per workload, MTU and non-default offload variant: each tunnel's headline change
    against the default variant of the same campaign."""
    out = []
    for wl, mtu, off in c.scenarios():
        if off == "default":
            continue
        metric = data.headline_metric(c, wl)
        if metric is None:
            continue
        parts, facts = [], {}
        for tun in c.tunnels():
            base, var = c.row(tun, (wl, mtu, "default"), metric), c.row(tun, (wl, mtu, off),
                                                                        metric)
            if base is None or var is None or not base.stats.mean:
                continue
            change = 100 * (var.stats.mean / base.stats.mean - 1)
            verdict, sig = _verdict(base.stats, var.stats)
            parts.append(f"{tun} {change:+.1f}% ({num(base.stats.mean)} → "
                         f"{num(var.stats.mean)} {unit(c, metric, var.unit)}, {verdict})")
            facts[tun] = {"change_pct": change, "significant": sig}
        if parts:
            out.append(Takeaway("offloads", f"In {wl} at MTU {mtu}, offloads {off} against the "
                                f"default, {metric_name(c, metric)}: " + "; ".join(parts)
                                + ".",
                                {"scenario": (wl, mtu, off), "metric": metric,
                                 "changes": facts}))
    return out


def _is_ovs(c: Campaign, label: str) -> bool:
    return c.kind_of(label).startswith("ovs-")


def ovs_vs_linux(c: Campaign) -> list[Takeaway]:
    """Per scenario with both: CPU per Gbit/s of OVS-based tunnels against Linux kernel
    tunnels (the study's finding that OVS costs more CPU for the same traffic)."""
    out = []
    for scen in c.scenarios():
        rows = [r for r in (c.row(t, scen, "cpu_per_gbit") for t in c.tunnels())
                if r is not None and r.kind != "native" and not encrypts(c, r.tunnel)]
        ovs = [r for r in rows if _is_ovs(c, r.tunnel)]
        linux = [r for r in rows if not _is_ovs(c, r.tunnel)]
        if not ovs or not linux:
            continue
        pairs = []
        facts: dict[str, Any] = {"scenario": scen, "ratios": {}}
        for o in ovs:
            for lx in linux:
                if not lx.stats.mean:
                    continue
                ratio = o.stats.mean / lx.stats.mean
                verdict, sig = _verdict(o.stats, lx.stats)
                pairs.append(f"{o.tunnel} needs {ratio:.2f}× the CPU per Gbit/s of "
                             f"{lx.tunnel} ({num(o.stats.mean)} vs {num(lx.stats.mean)} "
                             f"{unit(c, o.metric, o.unit)}, {verdict})")
                facts["ratios"][f"{o.tunnel}/{lx.tunnel}"] = (ratio, sig)
        if pairs:
            out.append(Takeaway("ovs-vs-linux", f"In {where(c, scen)}, OVS-based against Linux "
                                "tunnels: " + "; ".join(pairs) + ".", facts))
    return out


def encrypts(c: Campaign, label: str) -> bool:
    """Whether the tunnel shown as `label` encrypts, as its cases recorded it."""
    return c.encrypts(label)


def encrypted_by_streams(c: Campaign) -> list[Takeaway]:
    """In a sweep over streams: the encrypting tunnels ranked at each count, and where the
    leader changes (the study compared IPsec and WireGuard from 1 to 512 streams)."""
    out = []
    for sw in data.sweeps(c):
        if sw.over != "workload":
            continue
        rates = [m for m in sw.points if data.is_rate_unit(sw.units.get(m, ""))]
        if not rates:
            continue
        metric = rates[0]
        per = {t: pts for t, pts in sw.points[metric].items() if encrypts(c, t)}
        if len(per) < 2:
            continue
        xs = sorted(set.intersection(*(set(p) for p in per.values())))
        if not xs:
            continue
        items, leaders = [], {}
        for x in xs:
            summ = {t: stats.summarize(per[t][x]) for t in per}
            order = sorted(summ, key=lambda t: -summ[t].mean)
            lead, second = order[0], order[1]
            verdict, sig = _verdict(summ[lead], summ[second])
            leaders[x] = (lead, sig)
            items.append(f"{x}: " + " > ".join(f"{t} {num(summ[t].mean)}" for t in order)
                         + ("" if sig else f" ({verdict})"))
        changes = [x for a, x in zip(xs, xs[1:]) if leaders[a][0] != leaders[x][0]]
        text = (f"Encrypting tunnels in {sw.workload} by {sw.param} ({metric_name(c, metric)}, "
                f"{unit(c, metric, sw.units[metric])}): " + "; ".join(items) + ".")
        if changes:
            text += f" The lead changes at {', '.join(map(str, changes))} {sw.param}"
            text += ("." if any(leaders[x][1] for x in changes) else
                     ", but no such change is significant (95% CIs overlap).")
        else:
            text += f" {leaders[xs[0]][0]} leads at every count."
        out.append(Takeaway("encrypted-by-streams", text,
                            {"workload": sw.workload, "param": sw.param, "metric": metric,
                             "leaders": leaders, "changes": changes}))
    return out


def compute(c: Campaign) -> list[Takeaway]:
    return offload_variants(c) + ovs_vs_linux(c) + encrypted_by_streams(c)
