"""Per-hop figures of a chain: where packets were lost, how many routers the path has, and
how much latency each hop adds.

- Counters: every chain interface's packets/bytes/drops (`ip -s link`), its qdiscs' drops
  (`tc -s qdisc`: tbf's) and each function's own counters (nftables), before and after the
  workload. `dropped` sums those explicit drop counters (exact). A function only forwards,
  so what entered it (rx on both sides) minus what left it (tx on both sides) is also what
  it lost, whatever the cause (`lost`); devices count a GSO super-packet once and tbf may
  segment it, so `lost` is exact for traffic without GSO (UDP, loss-search) and a lower
  bound otherwise.
- TTL: a ping from site a to site b; the reply's TTL says how many routers it crossed.
- Latency: 20 pings from site a to each hop's near address and to site b; the hop's added
  latency is the difference between the median RTT to the next one and to it (medians: a
  shared host's scheduling hiccups move means; a difference under ~10 us is noise here).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import proc
from ..metrics.ping import parse_ping
from ..testbed.base import Testbed
from . import get
from .base import Hop

LINK_KEYS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped")
TTL_RE = re.compile(r"ttl=(\d+)")
TIME_RE = re.compile(r"time=([\d.]+) ms")
INITIAL_TTL = 64          # Linux's default (net.ipv4.ip_default_ttl)
PINGS = 20


def hops_of(tb: Testbed) -> list[Hop]:
    if tb.hops:
        return list(tb.hops)
    chain = tb.notes.get("chain") or {}
    return [Hop(h["name"], h["kind"], h.get("params", {}), h["netns"], h["left_if"],
                h["right_if"], h["left4"], h["right4"]) for h in chain.get("hops", [])]


def parse_link_stats(text: str) -> dict[str, dict[str, int]]:
    """`ip -j -s link show` -> {ifname: {rx_packets, ..., tx_dropped}} (pure)."""
    out: dict[str, dict[str, int]] = {}
    for link in json.loads(text or "[]"):
        st = link.get("stats64") or link.get("stats") or {}
        rx, tx = st.get("rx", {}), st.get("tx", {})
        out[link["ifname"]] = {"rx_packets": int(rx.get("packets", 0)),
                               "tx_packets": int(tx.get("packets", 0)),
                               "rx_bytes": int(rx.get("bytes", 0)),
                               "tx_bytes": int(tx.get("bytes", 0)),
                               "rx_dropped": int(rx.get("dropped", 0)),
                               "tx_dropped": int(tx.get("dropped", 0))}
    return out


def parse_qdisc_drops(text: str) -> dict[str, int]:
    """`tc -s -j qdisc show` -> {ifname: drops summed over its qdiscs} (pure)."""
    out: dict[str, int] = {}
    for q in json.loads(text or "[]"):
        out[q["dev"]] = out.get(q["dev"], 0) + int(q.get("drops", 0))
    return out


def _space(run: Any, ifnames: list[str]) -> dict[str, Any]:
    """Counters of some interfaces of one namespace; `run` reaches it (a site's or a hop's
    run: here, or on its host through the agent)."""
    links = parse_link_stats(run(["ip", "-j", "-s", "link", "show"], timeout=15).stdout)
    qd = parse_qdisc_drops(run(["tc", "-s", "-j", "qdisc", "show"], timeout=15).stdout)
    return {ifn: {**links.get(ifn, dict.fromkeys(LINK_KEYS, 0)), "qdisc_drops": qd.get(ifn, 0)}
            for ifn in ifnames}


def snapshot(tb: Testbed) -> dict[str, Any]:
    """Counters of every place on the path, in path order: site a, each hop, site b."""
    out: dict[str, Any] = {"a": {"ifaces": _space(tb.a.run, [tb.a.underlay_if])}}
    for hop in hops_of(tb):
        out[hop.name] = {"ifaces": _space(hop.run, [hop.left_if, hop.right_if]),
                         "function": get(hop.kind)().counters(hop)}
    out["b"] = {"ifaces": _space(tb.b.run, [tb.b.underlay_if])}
    return out


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before, place by place (pure)."""
    out: dict[str, Any] = {}
    for place, a in after.items():
        b = before.get(place, {})
        out[place] = {
            "ifaces": {ifn: {k: v - b.get("ifaces", {}).get(ifn, {}).get(k, 0)
                             for k, v in c.items()} for ifn, c in a["ifaces"].items()},
            "function": {k: v - b.get("function", {}).get(k, 0)
                         for k, v in a.get("function", {}).items()}}
    return out


def drop_table(d: dict[str, Any], kinds: dict[str, str]) -> list[dict[str, Any]]:
    """One row per place in path order: packets in and out, what a hop lost (in - out; sites
    originate and consume traffic, so none for them), interface and qdisc drops, and the
    function's own drop counters (pure)."""
    rows = []
    for place, v in d.items():
        ifs = v["ifaces"].values()
        rx = sum(c["rx_packets"] for c in ifs)
        tx = sum(c["tx_packets"] for c in ifs)
        fn = v.get("function", {})
        row = {"place": place, "kind": kinds.get(place, "site"), "rx_packets": rx,
               "tx_packets": tx, "lost": None if place in ("a", "b") else max(rx - tx, 0),
               "if_drops": sum(c["rx_dropped"] + c["tx_dropped"] for c in ifs),
               "qdisc_drops": sum(c["qdisc_drops"] for c in ifs),
               "policy_drops": sum(x for k, x in fn.items()
                                   if k.endswith("_packets") and k.split("_")[0] in
                                   ("denied", "policed"))}
        row["dropped"] = row["if_drops"] + row["qdisc_drops"] + row["policy_drops"]
        rows.append(row)
    return rows


def loss_of(row: dict[str, Any]) -> int:
    """A place's loss: its explicit drops, or what went in and not out when that is more."""
    return max(int(row["dropped"]), int(row["lost"] or 0))


def bottleneck(rows: list[dict[str, Any]], floor: int = 10) -> str | None:
    """The place (hop or site egress) that lost the most packets; None when none lost more
    than `floor` (a few packets are pings and neighbour discovery a hop answers itself)."""
    worst = max(rows, key=loss_of, default=None)
    return worst["place"] if worst and loss_of(worst) > floor else None


def _ping(tb: Testbed, addr: str, count: int = PINGS) -> dict[str, Any]:
    r = tb.a.run(["ping", "-n", "-c", str(count), "-i", "0.01", "-W", "1", addr],
                 check=False, timeout=30)
    try:
        s = parse_ping(r.stdout)
    except ValueError:
        s = {"received": 0, "rtt_avg_ms": None, "rtt_min_ms": None}
    ttls = [int(x) for x in TTL_RE.findall(r.stdout)]
    times = sorted(float(x) for x in TIME_RE.findall(r.stdout))
    median = times[len(times) // 2] if times else None
    return {**s, "ttl": ttls[0] if ttls else None, "rtt_median_ms": median}


def ttl_hops(ttl: int | None) -> int | None:
    """Routers crossed, from a reply's TTL (Linux sends 64)."""
    return None if ttl is None else INITIAL_TTL - ttl


def probe(tb: Testbed) -> dict[str, Any]:
    """TTL end to end and the latency each hop adds (idle path; before the workload)."""
    hops = hops_of(tb)
    targets = [(h.name, h.left4) for h in hops] + [("b", tb.b.underlay4)]
    rtts = {name: _ping(tb, addr) for name, addr in targets}
    end = rtts["b"]
    added = {}
    for (name, _), (nxt, _) in zip(targets, targets[1:]):
        lo, hi = rtts[name].get("rtt_median_ms"), rtts[nxt].get("rtt_median_ms")
        added[name] = None if lo is None or hi is None else round((hi - lo) * 1000, 1)
    return {"ttl": end["ttl"], "routers": ttl_hops(end["ttl"]),
            "expected_routers": (tb.notes.get("chain") or {}).get("routed_hops"),
            "rtt_us": {n: (None if r.get("rtt_median_ms") is None else
                           round(r["rtt_median_ms"] * 1000, 1)) for n, r in rtts.items()},
            "rtt_avg_us": {n: (None if r.get("rtt_avg_ms") is None else
                               round(r["rtt_avg_ms"] * 1000, 1)) for n, r in rtts.items()},
            "rtt_min_us": {n: (None if r.get("rtt_min_ms") is None else
                               round(r["rtt_min_ms"] * 1000, 1)) for n, r in rtts.items()},
            "added_us": added}


class HopWatch:
    """What a case records about its chain: the idle probe (TTL, latency per hop) and the
    counters around the workload, as the case's additive `chain` section."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.before: dict[str, Any] | None = None
        self.after: dict[str, Any] | None = None
        self.idle: dict[str, Any] | None = None

    def start(self) -> None:
        self.idle = probe(self.tb)
        self.before = snapshot(self.tb)

    def stop(self) -> None:
        self.after = snapshot(self.tb)

    def describe(self) -> dict[str, Any]:
        chain = self.tb.notes.get("chain") or {}
        out: dict[str, Any] = {"path": chain.get("path"), "hops": chain.get("hops"),
                               "probe": self.idle}
        if self.before is not None and self.after is not None:
            d = delta(self.before, self.after)
            kinds = {h["name"]: h["kind"] for h in chain.get("hops", [])}
            rows = drop_table(d, kinds)
            out.update(counters={"before": self.before, "after": self.after, "delta": d},
                       drops=rows, bottleneck=bottleneck(rows))
        return out


def requirements(kinds: list[str]) -> list[str]:
    """Tools the chain's functions need that this host lacks, one line each."""
    missing = []
    for kind in dict.fromkeys(kinds):
        for tool in get(kind).tools:
            if not proc.which(tool):
                missing.append(f"function {kind}: {tool} is not installed (apt-get install "
                               f"{proc.package_for(tool)})")
    return missing
