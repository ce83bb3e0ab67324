"""The raw per-round figures of a campaign for the decision summary (report/advise.py): per
method, each round's log-ratio to native's (shares, multiples) or difference (latency added),
at one underlay MTU and offload variant; what each method is, from the drivers' declarations
(advise_figures.declared). Pure functions over data.Campaign."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..errors import SpecError
from ..results.model import (
    BEST_OF_SECONDS,
    SLOWED_BELOW,
    case_stem,
    log_share,
    paired_value,
    round_reference,
)
from ..results.records import CaseRecord
from . import data, stats
from .advise_figures import declared, loss_metrics
from .data import Campaign

REF_MTU = 1500        # the underlay MTU the summary speaks of when a campaign ran several
REF_OFFLOADS = "default"
THROUGHPUT = "throughput"
CPU = "cpu_per_gbit"
LATENCY_PREFS = ("tcp_", "udp_", "")   # the p50 metric named first: TCP's round trip


def reference(c: Campaign, want_mtu: int | None = None, want_off: str | None = None
               ) -> tuple[int, str] | None:
    """(underlay MTU, offload variant) the summary speaks of: the ones asked for (`--mtu`,
    `--offloads`; one SpecError line when not measured), else 1500 and default when run."""
    scens = [(mtu, off) for _, mtu, off in c.scenarios()]
    if not scens:
        return None
    mtus = sorted({m for m, _ in scens})
    if want_mtu is not None and want_mtu not in mtus:
        raise SpecError(f"--mtu {want_mtu}: {c.root} measured underlay MTU "
                        f"{', '.join(map(str, mtus))} only",
                        f"measure it with tunbench run --mtu {want_mtu} (mtus in an experiment "
                        "file), or give a measured MTU")
    mtu = want_mtu if want_mtu is not None else REF_MTU if REF_MTU in mtus else mtus[0]
    offs = list(dict.fromkeys(o for m, o in scens if m == mtu))
    if want_off is not None and want_off not in offs:
        raise SpecError(f"--offloads {want_off}: {c.root} measured offload variant(s) "
                        f"{', '.join(offs)} at MTU {mtu} only",
                        f"measure it with tunbench run --offloads {want_off} --mtu {mtu}, or give a "
                        "measured variant")
    return mtu, (want_off if want_off is not None else
                 REF_OFFLOADS if REF_OFFLOADS in offs else offs[0])


def _one_core_count(ok: list[CaseRecord], notes: list[str]) -> list[CaseRecord]:
    """A campaign on the site-size axis (cpus_per_site): the summary reads the most cores
    per site (each method at full size; report/sitesize.py tables every count), noted."""
    from .sitesize import cores_of
    counts = sorted({k for d in ok if (k := cores_of(d)) is not None})
    if not counts:
        return ok
    if len(counts) > 1:
        notes.append(f"figures at {counts[-1]} cores per site; measured: "
                     f"{', '.join(map(str, counts))} (the report's \"Site size in cores\" "
                     "has each count)")
    return [d for d in ok if cores_of(d) in (counts[-1], None)]


def _one_wan_scenario(ok: list[CaseRecord], notes: list[str]) -> list[CaseRecord]:
    """A campaign on the RTT / loss axes (testbed/wanaxis.py): the summary reads the scenario
    of the lowest RTT and loss (the methods' own datapaths, least of the emulated path;
    report/distance.py tables every scenario), noted. Pooling the scenarios would mix a
    method's figure at 0 ms with its figure at 80 ms."""
    from .distance import axis_values, loss_key, rtt_key
    seen = {axis_values(d) for d in ok} - {(None, None)}
    if not seen:
        return ok
    first = min(seen, key=lambda s: (rtt_key(s[0]), loss_key(s[1])))
    if len(seen) > 1:
        tag = " ".join(f"{k}={v}" for k, v in zip(("rtt", "loss"), first, strict=True) if v)
        notes.append(f"figures at {tag}; measured {len(seen)} RTT/loss scenarios (the "
                     "report's \"Distance and loss\" has each)")
    return [d for d in ok if axis_values(d) in (first, (None, None))]


def _one_rate(ok: list[CaseRecord], notes: list[str]) -> list[CaseRecord]:
    """A campaign on the rate axis (testbed/wanaxis.py): the summary reads the highest rate
    (least of the shaping; report/axes.py tables every rate), noted, not the rates pooled."""
    from .axes import rate_key, rate_of
    seen = sorted({r for d in ok if (r := rate_of(d)) is not None}, key=rate_key)
    if not seen:
        return ok
    if len(seen) > 1:
        notes.append(f"figures at rate={seen[-1]}; measured: {', '.join(seen)} (the "
                     "report's \"Underlay rate\" has each)")
    return [d for d in ok if rate_of(d) in (seen[-1], None)]


def _streams(case: CaseRecord) -> int:
    wl = case.workload          # the axes the writer recorded (results v2)
    for p in wl.axes:
        if p == "cpus_per_site":    # the site-size axis, named in by results/records.py
            continue
        v = wl.params.get(p)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 1


def _throughput_base(c: Campaign, ok: list[CaseRecord]) -> str | None:
    """The throughput workload the summary reads: stream when run, else the first one."""
    bases = list(dict.fromkeys(d.workload.base for d in ok if d.value(THROUGHPUT) is not None))
    return "stream" if "stream" in bases else (bases[0] if bases else None)


def _latency_metric(c: Campaign, ok: list[CaseRecord]) -> tuple[str, str] | None:
    """(workload, base) of the first latency workload with p50 metrics ('tcp_rtt')."""
    for d in ok:
        names = [n[:-4] for n in d.metrics if n.endswith("_p50")]
        for pref in LATENCY_PREFS:
            found = [n for n in names if n.startswith(pref)]
            if found and d.value(THROUGHPUT) is None:
                return d.workload.name, found[0]
    return None


def slowed_note(slow: list[CaseRecord], cases: list[CaseRecord]) -> str:
    """'left out of the shares, slowed by the host for their whole window: ...' naming each
    case with its best second against the median of its rounds (records.mark_slowed)."""
    by_stem: dict[str, list[float]] = {}
    for d in cases:
        v = paired_value(d.value(THROUGHPUT), True, d.series.get(THROUGHPUT))
        if v:
            by_stem.setdefault(case_stem(d.id), []).append(v)
    parts = []
    for d in slow:
        best = paired_value(d.value(THROUGHPUT), True, d.series.get(THROUGHPUT)) or 0.0
        med = statistics.median(by_stem.get(case_stem(d.id)) or [best])
        parts.append(f"{d.id} ({best / med:.2f} of its rounds' median)")
    return (f"left out of the shares, slowed by the host for their whole window (best second "
            f"below {SLOWED_BELOW:.2f} of the median of the same case's rounds): "
            f"{', '.join(parts)} (their Mbit/s stay in the tables; docs/methodology.md, "
            "\"What a round pairs\")")


def _pairing_notes(tdocs: list[CaseRecord]) -> list[str]:
    """How the throughput shares were paired: native beside the method (model.own_share)
    and each round's best second against native's in the same round."""
    beside = sorted({d.tunnel.label for d in tdocs if d.own_share(THROUGHPUT) is not None})
    by_round = sorted({d.tunnel.label for d in tdocs if d.own_share(THROUGHPUT) is None
                       and not _is_reference(d)})
    best = any(len(d.series.get(THROUGHPUT) or ()) >= BEST_OF_SECONDS for d in tdocs)
    notes = []
    if beside:
        notes.append(f"share of native for {', '.join(beside)}: native measured beside the "
                     "method, 1 s bursts of each in turn with the tunnel up, the ratio of "
                     "their means (docs/methodology.md, \"Native beside the method\")")
    if best and (by_round or not beside):
        whose = f" for {', '.join(by_round)}" if beside else ""
        notes.append(f"share of native{whose}: each round's best 1-s interval against "
                     "native's in the same round (the Mbit/s columns are means; "
                     "docs/methodology.md)")
    return notes


def _paired(docs: list[CaseRecord], native: dict[tuple[Any, ...], float], key: Any,
            metric: str, op: str) -> list[tuple[Any, float]]:
    """Per round: (round, ln(method / native)) or (round, method - native), against native
    in the same round; a round without native (or a non-positive ratio side) is left out."""
    out = []
    for d in docs:
        v = d.paired(metric)
        r = stats.round_of(d)
        ref = native.get((key, r))
        if op == "diff":
            if v is not None and ref is not None:
                out.append((r, v - ref))
        elif (x := log_share(v, ref, d.own_share(metric))) is not None:
            out.append((r, x))   # the case's own share where it measured native beside it
    return out


def _native_values(ok: list[CaseRecord], keyf: Any, metric: str
                   ) -> dict[tuple[Any, ...], float]:
    by_round: dict[tuple[Any, ...], list[float]] = {}
    for d in ok:
        v = d.paired(metric)
        if _is_reference(d) and v is not None:
            by_round.setdefault((keyf(d), stats.round_of(d)), []).append(v)
    return _per_round(by_round)


def _one_run_each(docs: list[CaseRecord]) -> list[CaseRecord]:
    """The cases a method's per-round figures come from: native's further runs in a round
    (plan.spread_natives) only make its reference (_native_values), one value per round."""
    return [d for d in docs if d.native_run == 1]


def _per_round(runs: dict[tuple[Any, ...], list[float]]) -> dict[tuple[Any, ...], float]:
    """Native's figure per round from its runs there (several: plan.spread_natives)."""
    return {k: round_reference(vs) for k, vs in runs.items()}


def _is_reference(d: CaseRecord) -> bool:
    """Native measured direct (a native through a chain is measured against it)."""
    return d.tunnel.native and not d.tunnel.label.endswith(stats.VIA_CHAIN)


Samples = dict[str, dict[str, Any]]   # label -> what collect() gathered


FIGURE_KEYS = ("share", "cpu", "cpu_abs", "latency", "loss")
DECLARED = ("encrypts", "carries", "kernel", "gateways", "gateway_encrypts", "gateway_kernel")


def _new_sample(d: CaseRecord) -> dict[str, Any]:
    decl = declared(d)
    return {"kind": d.tunnel.kind, "impl": d.tunnel.impl,
            "encrypts": decl.encrypts, "carries": decl.carries, "kernel": decl.kernel,
            "gateways": decl.gateways, "gateway_encrypts": decl.gateway_encrypts,
            "gateway_kernel": decl.gateway_kernel, "mtu": set(), "failed": [], "ok": 0,
            **{k: {} for k in FIGURE_KEYS}}


def collect(c: Campaign, variant: tuple[int | None, str | None] = (None, None)
            ) -> tuple[Samples, list[str]]:
    """Per method, the raw per-round figures of one campaign at one underlay MTU and offload
    variant (`variant`: the ones asked for, None: the default); and notes on what was read."""
    notes: list[str] = []
    ref = reference(c, *variant)
    out: Samples = {}
    for d in c.cases:
        label = d.tunnel.label
        m = out[label] if label in out else out.setdefault(label, _new_sample(d))
        if not d.ok:
            m["failed"].append(str(d.error or d.status))
        elif m["gateways"] is None and declared(d).gateways:   # a failed case may lack it
            m.update({k: v for k, v in _new_sample(d).items() if k in DECLARED})
    if ref is None:
        return out, ["no case measured: nothing to summarize"]
    mtu, off = ref
    ok = [d for d in c.ok if (d.mtu, d.offloads) == (mtu, off)]
    ok = _one_core_count(ok, notes)
    ok = _one_wan_scenario(ok, notes)
    ok = _one_rate(ok, notes)
    offs = sorted({s[2] for s in c.scenarios()})
    if len(c.mtus()) > 1 or len(offs) > 1:
        notes.append(f"figures at underlay MTU {mtu}, offloads {off}; measured: MTU "
                     f"{', '.join(map(str, c.mtus()))}, offloads {', '.join(offs)} "
                     "(--mtu, --offloads choose another)")
    for d in ok:
        m = out[d.tunnel.label]
        m["ok"] += 1
        tmtu = d.tunnel_state.get("mtu")
        if isinstance(tmtu, int):
            m["mtu"].add(tmtu)
    base = _throughput_base(c, ok)
    if base is not None:
        tdocs = [d for d in ok if d.workload.base == base]
        nat = _native_values(tdocs, _streams, THROUGHPUT)
        cnat = _native_values(tdocs, _streams, CPU)
        for d in _one_run_each(tdocs):
            m, n = out[d.tunnel.label], _streams(d)
            m["share"].setdefault(n, []).extend(_paired([d], nat, n, THROUGHPUT, "ratio"))
            m["cpu"].setdefault(n, []).extend(_paired([d], cnat, n, CPU, "ratio"))
            v = d.value(CPU)
            if v is not None and v > 0:   # a positive quantity: on the log scale too
                m["cpu_abs"].setdefault(n, []).append((d.repeat, math.log(v)))
        if not nat:
            notes.append(f"no native baseline in {base}: shares of native cannot be computed")
        else:
            notes += _pairing_notes(tdocs)
        runs = max((d.native_run for d in tdocs), default=1)
        if runs > 1:
            notes.append(f"native measured {runs} times in each round, spread through it: "
                         "every share is against the geometric mean of those runs")
        slow = [d for d in tdocs if THROUGHPUT in d.slowed]
        if slow:
            notes.append(slowed_note(slow, tdocs))
    lat = _latency_metric(c, ok)
    if lat is not None:
        wl, metric = lat
        ldocs = [d for d in ok if d.workload.name == wl]
        for q in ("p50", "p99"):
            nat = _native_values(ldocs, lambda d: 0, f"{metric}_{q}")
            for d in _one_run_each(ldocs):
                out[d.tunnel.label]["latency"].setdefault(q, []).extend(
                    _paired([d], nat, 0, f"{metric}_{q}", "diff"))
        unit = data.metric_unit(ldocs, f"{metric}_p50")
        notes.append(f"latency added: {metric} p50/p99 of {wl}, in {unit}, against native's")
        for m in out.values():
            m["latency_unit"] = unit
    _collect_loss(c, ok, out, notes)
    return out, notes


def _collect_loss(c: Campaign, ok: list[CaseRecord], out: Samples,
                  notes: list[str]) -> None:
    """NDR/PDR/RFC 2544 packets/s per frame size of the first loss-search scenario, each
    round against native's in the same round (log scale, % of native)."""
    wls = list(dict.fromkeys(d.workload.name for d in ok if loss_metrics(c, d)))
    if not wls:
        return
    ldocs = [d for d in ok if d.workload.name == wls[0]]
    runs: dict[tuple[Any, ...], list[float]] = {}
    for d in ldocs:
        if _is_reference(d):
            for name, key in loss_metrics(c, d).items():
                v = d.value(name)
                if v is not None:
                    runs.setdefault((key, stats.round_of(d)), []).append(v)
    native = _per_round(runs)
    for d in _one_run_each(ldocs):
        for name, key in loss_metrics(c, d).items():
            out[d.tunnel.label]["loss"].setdefault(key, []).extend(
                _paired([d], native, key, name, "ratio"))
    notes.append(f"packets/s at NDR/PDR/RFC 2544 from {wls[0]}, per frame size, against "
                 "native's" + (f" ({', '.join(wls[1:])} in the tables)" if wls[1:] else ""))


