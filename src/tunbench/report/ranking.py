"""The ranking of the decision summary and `tunbench advise`, and its JSON: neighbours in
the order of their figure are decided against each other (report/decide.py), the verdict
says what is settled and what is not, with the rounds it would take."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from . import decide

if TYPE_CHECKING:
    from .advise import Advice, Figure, Method


def _n(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def pair(a: str, fa: Figure, b: str, fb: Figure) -> decide.Pair:
    """Two methods' figures, paired round by round, for decide.decide: log-ratios with the
    ±3-point margin at their level; differences (latency) with no equivalence margin."""
    if fa.scale is not None:
        return decide.pair_of_shares(a, b, fa.by_round(), fb.by_round(),
                                     higher_is_better=fa.higher_is_better)
    la, lb = fa.by_round(), fb.by_round()
    return decide.Pair(a, b, tuple(la[r] - lb[r] for r in la if r in lb), 0.0)


def against_native(methods: list[Method]) -> None:
    """Each share, multiple and latency added decided against native (0 on its scale), Holm
    over the methods at the same stream count (or percentile)."""
    for k in ("share", "cpu", "latency", "loss"):
        xs = {x for m in methods for x in getattr(m, k)}
        for x in xs:
            figs = {m.label: getattr(m, k)[x] for m in methods
                    if x in getattr(m, k) and not m.reference}
            pairs = [decide.reference_pair(label, [v for _, v in f.rounds],
                                           higher_is_better=f.higher_is_better)
                     if f.scale else decide.Pair(label, "native",
                                                 tuple(v for _, v in f.rounds), 0.0)
                     for label, f in figs.items()]
            for m, d in ((m, d) for d in decide.decide(pairs) for m in methods
                         if m.label == d.a):
                f = figs[d.a]
                getattr(m, k)[x] = dataclasses.replace(f, verdict=d.verdict, need=d.rounds_needed)


def rank(cands: list[tuple[Method, Figure]]
         ) -> tuple[list[tuple[int, Method, Figure]], list[decide.Decision | None]]:
    """Ranks from the neighbours' decisions (Holm over the neighbours compared): a method
    starts a new rank only when it is *different* from the one above it; equivalent,
    undecided and untested neighbours share a rank."""
    if not cands:
        return [], []
    pairs = [pair(a.label, fa, b.label, fb)
             for (a, fa), (b, fb) in zip(cands, cands[1:], strict=False)]
    decisions: list[decide.Decision | None] = [None, *decide.decide(pairs)]
    ranked: list[tuple[int, Method, Figure]] = []
    for i, ((m, fig), d) in enumerate(zip(cands, decisions, strict=True)):
        same = d is not None and d.verdict != decide.DIFFERENT
        ranked.append((ranked[-1][0] if same else i + 1, m, fig))
    return ranked, decisions


def more_rounds_n(need: int | None, n: int) -> str:
    """'about 3 more rounds (--repeats 5)' for a pair undecided after n rounds; a run without
    --repeats (sequential.py) adds such rounds by itself, within its --budget."""
    if need is None:
        return "run more rounds"
    if need > decide.MAX_ROUNDS - n:
        return f"more than {decide.MAX_ROUNDS} rounds"
    return (f"about {need} more round{'s' if need != 1 else ''} (--repeats {n + need}, or no "
            "--repeats: rounds are added until decided)")


def more_rounds(d: decide.Decision) -> str:
    return more_rounds_n(d.rounds_needed, d.n)


def decision_text(d: decide.Decision | None) -> str:
    """What a rank line says of a method against the one above it."""
    if d is None:
        return ""
    if d.verdict == decide.DIFFERENT:
        return f"different from {d.a} (Holm-corrected)"
    if d.verdict == decide.EQUIVALENT:
        return f"equivalent to {d.a} (within ±{100 * decide.MARGIN:g} points of native)"
    if d.verdict == decide.UNTESTED:
        return f"untested against {d.a} (a single round)"
    return f"undecided against {d.a}: {more_rounds(d)}"


def verdict(ranked: list[tuple[int, Method, Figure]], decisions: list[decide.Decision | None],
             excluded: list[tuple[Method, list[str]]], basis: str) -> str:
    if not ranked and not excluded:
        return "Nothing to rank: the campaign measured no method besides native."
    if not ranked:
        return (f"No method meets the constraints: all {len(excluded)} are excluded, each "
                "with its reason; relax a constraint or measure more methods.")
    if len(ranked) == 1:
        return f"{ranked[0][1].label} is the only method meeting the constraints."
    first, second = ranked[0], ranked[1]
    d = decisions[1]
    if d is None or d.verdict == decide.DIFFERENT:
        return (f"{first[1].label} ranks first by {basis} ({_n(first[2].est.mean)}), ahead of "
                f"{second[1].label} ({_n(second[2].est.mean)}): different, paired round by "
                "round (Holm-corrected).")
    also = [m.label for r, m, _ in ranked[2:] if r == 1]
    tail = (f" {', '.join(also)} share{'s' if len(also) == 1 else ''} rank 1 with them."
            if also else "")
    if d.verdict == decide.UNTESTED:
        return (f"No winner can be named by {basis}: {d.a} and {d.b} were measured once "
                "each (untested); run at least 2 rounds (no --repeats: rounds are added until "
                "decided)." + tail)
    if d.verdict == decide.UNDECIDED:
        return (f"No winner yet by {basis}: {d.a} against {d.b} is undecided, "
                f"{more_rounds(d)}; not a tie, the rounds so far cannot tell them apart."
                + tail)
    return (f"No winner by {basis}: {d.a} and {d.b} are equivalent (within "
            f"±{100 * decide.MARGIN:g} points of native); decide on another figure "
            "(--by throughput|throughput-best|ndr|pdr|rfc2544|latency-p50|latency-p99|cpu)."
            + tail)


# -- JSON ---------------------------------------------------------------------------------

def method_json(m: Method) -> dict[str, Any]:
    single, best = m.single(), m.best()
    loss: dict[str, dict[str, Any]] = {}
    for (goal, size), f in sorted(m.loss.items()):
        loss.setdefault(goal, {})[size] = f.to_json()
    return {
        "method": m.label, "kind": m.kind, "impl": m.impl, "encrypts": m.encrypts,
        "reference": m.reference, "mtu_left": m.mtu_left, "relay": m.relay,
        "carries": list(m.carries) if m.carries is not None else None,
        "kernel_datapath": m.kernel,
        "gateways": None if m.gateways is None else {
            "tunnel": m.gateways, "encrypts": m.gateway_encrypts,
            "kernel_datapath": m.gateway_kernel},
        "share_single": None if single is None else {"streams": single[0],
                                                     **single[1].to_json()},
        "share_best": None if best is None else {"streams": best[0], **best[1].to_json()},
        "cpu_per_gbit_x_native": {str(x): f.to_json() for x, f in sorted(m.cpu.items())},
        "cpu_per_gbit": {str(x): f.to_json() for x, f in sorted(m.cpu_abs.items())},
        "latency_added": {q: f.to_json() for q, f in m.latency.items()},
        "latency_unit": m.latency_unit if m.latency else None,
        "loss_search_pps_share": loss,
        "failed": m.failed,
    }


def to_json(a: Advice) -> dict[str, Any]:
    k = a.constraints
    return {
        "format": "tunbench-advice", "format_version": 3,
        "constraints": {"need": ["encryption"] if k.need_encryption else [],
                        "min_mtu": k.min_mtu, "max_cpu_per_gbit": k.max_cpu,
                        "max_cpu_per_gbit_unit": "x native" if k.max_cpu_relative
                        else "% of one core per Gbit/s",
                        "carries": list(k.carries), "max_added_p99_us": k.max_added_p99,
                        "kernel_only": k.kernel_only, "streams": a.streams, "by": k.prefer,
                        "frame_size": a.frame_size},
        "variant": None if a.variant is None else {"mtu": a.variant[0],
                                                   "offloads": a.variant[1]},
        "basis": a.basis,
        "summary": [method_json(m) for m in a.methods],
        "ranking": [{"rank": r, "method": m.label, **f.to_json(),
                     "tied_with_previous": i > 0 and a.ranked[i - 1][0] == r,
                     "against_previous": d.to_json() if d else None}
                    for i, ((r, m, f), d) in enumerate(zip(a.ranked, a.decisions,
                                                           strict=True))],
        "excluded": [{"method": m.label, "reasons": why} for m, why in a.excluded],
        "verdict": a.verdict, "notes": a.notes,
    }
