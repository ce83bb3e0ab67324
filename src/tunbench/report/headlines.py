"""Fewer, sharper take-aways: a handful per scenario, the ones that matter most first.

report/takeaways.py states everything the data supports; a reader needs the few sentences
that change a decision. Each take-away gets an importance from its own facts (how large a
gap to native, a one-core bottleneck, a ranking that flips with the MTU or the stream count,
a significant scale-out); per scenario at most MAX_PER_SCENARIO are shown, in that order, and
the rest are folded below. The caveat most sentences repeat ("one run each: ...") is cut from
them and said once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .takeaways import Takeaway

MAX_PER_SCENARIO = 4
SINGLE_RUN = re.compile(r"[;,.]?\s*one run each: no confidence interval, significance not "
                        r"tested\.?", re.IGNORECASE)
SINGLE_CAVEAT = ("Single runs: where a figure rests on one run per method there is no "
                 "confidence interval, and no difference between them was tested for "
                 "significance; run --repeats 3 or more.")


@dataclass
class Headlines:
    top: list[Takeaway]                   # the ones shown, most important first per scenario
    rest: list[Takeaway]                  # folded below
    caveats: list[str] = field(default_factory=list)   # said once, under the list


def _ratio_gap(x: float) -> float:
    """0..100 from a multiple (2× native: 50, 10×: 90)."""
    return 100.0 * (1 - 1 / x) if x > 1 else 0.0


def importance(t: Takeaway) -> float:
    """How much a take-away matters to a decision, 0..100, from its facts."""
    f = t.facts
    if t.topic == "one-core":
        return 90.0
    if t.topic == "jumbo":
        return {"significant": 95.0, "not-significant": 35.0}.get(str(f.get("change")), 10.0)
    if t.topic == "flip":
        return 92.0 if f.get("significant") else 40.0
    if t.topic == "share-of-native":
        pct = f.get("pct")
        if pct is None:   # a sweep's merged sentence: the smallest share over the sweep
            pcts = [v.get("pct", 100.0) for v in (f.get("by_value") or {}).values()]
            pct = min(pcts, default=100.0)
        gap = abs(100.0 - float(pct))
        # the headline of a scenario: kept high even when no gap to native is significant
        return min(88.0, 45.0 + gap) if f.get("distinct_from_native") is not False else 45.0
    if t.topic == "cpu-per-gbit":
        sig = f.get("significant")
        ratios = [r for k, r in (f.get("ratios") or {}).items() if sig is None or k in sig] \
            or [r for v in (f.get("by_value") or {}).values()
                for r in v.get("ratios", {}).values()]
        return min(85.0, 30.0 + 0.6 * _ratio_gap(max(ratios, default=1.0)))
    if t.topic == "latency":
        deltas = [abs(v) for k, v in (f.get("deltas") or {}).items()
                  if k not in (f.get("same") or [])]
        return 60.0 if deltas else 25.0
    if t.topic == "scale-out":
        return 75.0 if f.get("scales") else 45.0
    if t.topic == "scaling":   # native's own scaling is context, not a choice
        return 20.0 if f.get("tunnel") == "native" else 55.0 if f.get("stops") else 40.0
    if t.topic == "noisy":   # a caveat on everything above it, said once
        return 35.0
    if t.topic == "agg-tradeoff":   # the answer a flush-timeout sweep is run for
        return 80.0
    return 30.0   # on-wire, peers and what comes later: facts worth having, rarely decisive


def group(t: Takeaway) -> str:
    """The scenario a take-away speaks of (its workload; a sweep's base workload)."""
    scen = t.facts.get("scenario") or next(
        (v.get("scenario") for v in (t.facts.get("by_value") or {}).values()
         if isinstance(v, dict)), None)   # a sweep's merged sentence: its values' scenario
    if scen:
        return str(scen[0]).split(" ")[0]
    return str(t.facts.get("workload") or "campaign").split(" ")[0]


def _strip(t: Takeaway) -> tuple[Takeaway, bool]:
    text, n = SINGLE_RUN.subn("", t.text)
    if not n:
        return t, False
    text = text.rstrip(" ;,")
    return Takeaway(t.topic, text if text.endswith(".") else text + ".", t.facts), True


def select(takes: list[Takeaway], limit: int = MAX_PER_SCENARIO) -> Headlines:
    """At most `limit` take-aways per scenario, most important first; the rest folded; the
    repeated single-run caveat said once."""
    stripped = [_strip(t) for t in takes]
    cleaned = [t for t, _ in stripped]
    caveats = [SINGLE_CAVEAT] if any(s for _, s in stripped) else []
    groups: dict[str, list[Takeaway]] = {}
    for t in cleaned:
        groups.setdefault(group(t), []).append(t)
    top: list[Takeaway] = []
    rest: list[Takeaway] = []
    for items in groups.values():
        items.sort(key=lambda t: -importance(t))   # stable: the campaign order breaks ties
        top += items[:limit]
        rest += items[limit:]
    top.sort(key=lambda t: -importance(t))
    return Headlines(top, rest, caveats)


def to_json(h: Headlines) -> dict[str, Any]:
    return {"top": [{"topic": t.topic, "text": t.text, "importance": importance(t)}
                    for t in h.top],
            "more": [{"topic": t.topic, "text": t.text} for t in h.rest],
            "caveats": h.caveats}


def stream_flips(c: Any) -> list[Takeaway]:
    """Where the order of two methods by share of native throughput at the fewest streams
    is reversed at the most streams: significant only when the pair is decided different at
    both counts (paired per round, Holm over the two comparisons; report/decide.py)."""
    from . import advise, decide, ranking
    methods, _ = advise.summarize([c])
    ms = [m for m in methods if not m.reference and len(m.share) > 1]
    counts = sorted({n for m in ms for n in m.share})
    if len(counts) < 2:
        return []
    lo, hi = counts[0], counts[-1]
    out = []
    for i, a in enumerate(ms):
        for b in ms[i + 1:]:
            if not all(n in m.share for m in (a, b) for n in (lo, hi)):
                continue
            alo, blo, ahi, bhi = (m.share[n].est.mean for n, m in
                                  ((lo, a), (lo, b), (hi, a), (hi, b)))
            if (alo > blo) == (ahi > bhi):
                continue
            first, second = (a, b) if alo > blo else (b, a)
            sig = all(d.verdict == decide.DIFFERENT for d in decide.decide(
                [ranking.pair(a.label, a.share[n], b.label, b.share[n]) for n in (lo, hi)]))
            f_lo, s_lo, f_hi, s_hi = (m.share[n].est.mean for n, m in
                                      ((lo, first), (lo, second), (hi, first), (hi, second)))
            text = (f"The ranking flips with the stream count: {first.label} keeps more of "
                    f"native throughput than {second.label} at {lo} stream(s) "
                    f"({f_lo:.1f}% vs {s_lo:.1f}%) but less at {hi} ({f_hi:.1f}% vs "
                    f"{s_hi:.1f}%)"
                    + ("." if sig else "; the pair is not decided different at both counts, "
                       "so the flip is not significant."))
            out.append(Takeaway("flip", text, {"workload": "stream", "pair": (first.label,
                                second.label), "streams": (lo, hi), "significant": sig}))
    return out


def esc(x: Any) -> str:
    import html
    return html.escape(str(x), quote=True)


def html_section(takes: list[Takeaway]) -> str:
    """The take-aways of the report: the selected few, the caveat once, the full list
    folded below."""
    h = select(takes)
    if not takes:
        return ("<ul class=takeaways><li>No take-away: the campaign has no figures to "
                "compare with native.</li></ul>")
    top = "".join(f"<li>{esc(t.text)}</li>" for t in h.top)
    cav = "".join(f"<p class=meta>{esc(x)}</p>" for x in h.caveats)
    full = "".join(f"<li>{esc(_strip(t)[0].text)}</li>" for t in takes)
    return (f"<ul class=takeaways>{top}</ul>{cav}<details id=all-takeaways><summary>All "
            f"{len(takes)} take-aways, in the order they are computed</summary>"
            f"<ul>{full}</ul></details>")
