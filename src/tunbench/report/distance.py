"""Distance and loss: each method's throughput and share of native against RTT and loss.

A campaign on the RTT / loss axes (testbed/wanaxis.py) measures every method at each (RTT,
loss) scenario in the same round, native first. Per workload (its base), MTU and offload
variant, one table against RTT (one per loss value) and one against loss (one per RTT): each
method's headline figure (mean over rounds) and its share of native, paired per round at
the same scenario (the geometric mean of each round's ratio, lowest-highest round).

The reference line is the TCP model of Mathis et al. (1997): a Reno-style flow that loses a
share p of its segments at a round trip RTT reaches at most MSS / RTT * C / sqrt(p) with
C = sqrt(3/2). It is drawn where the scenario has loss > 0 and an RTT > 0 (the axis value, or
twice the campaign's fixed delay); the MSS is the case's tunnel MTU less 52 bytes (IPv4 and
TCP headers with timestamps; 72 with IPv6). It is a model, not a bound this testbed obeys:
CUBIC is not Reno, and netem drops whole GSO packets on a veth, so a segment is lost less
often than p; a method above the line is not wrong.

Pure over the typed case records (the values are the case's `rtt` / `loss`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..results.records import CaseRecord
from .axes import Share, axis_section, by_method, num, paired_share, share_text, where
from .data import Campaign

C_MATHIS = math.sqrt(1.5)
HEADERS = {4: 52, 6: 72}   # IP + TCP with timestamps: MSS = MTU - this


def _time_ms(v: str) -> float | None:
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    for u in ("us", "ms", "s"):
        if v.endswith(u):
            try:
                return float(v[: -len(u)]) * units[u]
            except ValueError:
                return None
    return None


def _pct(v: str) -> float | None:
    try:
        return float(v.rstrip("%")) if v.endswith("%") else None
    except ValueError:
        return None


def axis_values(r: CaseRecord) -> tuple[str | None, str | None]:
    """(rtt, loss) as the case recorded them (None: not on that axis)."""
    case = r.doc.get("case", {}) if r.doc else {}
    rtt, loss = case.get("rtt"), case.get("loss")
    return (rtt if isinstance(rtt, str) and rtt else None,
            loss if isinstance(loss, str) and loss else None)


def scenario_of(r: CaseRecord) -> tuple[str, str] | None:
    """(rtt, loss) of a case on either axis ('' for the one it is not on); None on neither."""
    rtt, loss = axis_values(r)
    return None if rtt is None and loss is None else (rtt or "", loss or "")


def rtt_key(v: str | None) -> float:
    """An RTT value as given ('20ms') in ms, for ordering (none: 0)."""
    return (_time_ms(v) or 0.0) if v else 0.0


def loss_key(v: str | None) -> float:
    """A loss value as given ('0.1%') in %, for ordering (none: 0)."""
    return (_pct(v) or 0.0) if v else 0.0


def mathis(mss: int, rtt_ms: float, loss_pct: float) -> float | None:
    """The Mathis model's rate in bit/s (None where it has no value: RTT or loss 0)."""
    if rtt_ms <= 0 or loss_pct <= 0:
        return None
    return 8 * mss / (rtt_ms / 1000) * C_MATHIS / math.sqrt(loss_pct / 100)


UNIT_BITS = {"bit/s": 1.0, "kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9}


@dataclass
class Method:
    tunnel: str
    native: bool
    # scenario (rtt, loss) -> values over rounds; round -> scenario -> value
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    by_round: dict[Any, dict[tuple[str, str], float]] = field(default_factory=dict)
    mss: int | None = None

    def mean(self, s: tuple[str, str]) -> float | None:
        v = self.values.get(s)
        return statistics.fmean(v) if v else None


@dataclass
class Sweep:
    workload: str     # the base workload ('stream')
    mtu: int
    offloads: str
    metric: str
    unit: str
    rtts: list[str]   # values in the order measured ('' when not on the RTT axis)
    losses: list[str]
    methods: list[Method]
    base_rtt_ms: float = 0.0   # twice the campaign's fixed delay (for a loss-only axis)

    def rtt_ms(self, rtt: str) -> float:
        return (_time_ms(rtt) or 0.0) if rtt else self.base_rtt_ms

    def loss_pct(self, loss: str, fixed: float = 0.0) -> float:
        return (_pct(loss) or 0.0) if loss else fixed

    def native(self) -> Method | None:
        return next((m for m in self.methods if m.native), None)

    def share(self, m: Method, s: tuple[str, str]) -> Share | None:
        """(geometric mean, lowest, highest, n) of the method / native of the same round at
        scenario s; None without a round that measured both."""
        nat = self.native()
        if nat is None:
            return None
        return paired_share((r[s], nat.by_round[k][s]) for k, r in m.by_round.items()
                            if s in r and s in nat.by_round.get(k, {}))

    def model(self, m: Method, s: tuple[str, str], fixed_loss: float = 0.0) -> float | None:
        """The Mathis rate at scenario s in the metric's unit (None where not drawn)."""
        if m.mss is None or self.unit not in UNIT_BITS:
            return None
        v = mathis(m.mss, self.rtt_ms(s[0]), self.loss_pct(s[1], fixed_loss))
        return None if v is None else v / UNIT_BITS[self.unit]


def _mss(r: CaseRecord, family: int) -> int | None:
    mtu = r.tunnel_state.get("mtu") if r.tunnel_state else None
    if not isinstance(mtu, int) or isinstance(mtu, bool):
        mtu = r.mtu or None
    return mtu - HEADERS.get(family, 52) if mtu else None


def fixed(c: Campaign) -> tuple[float, float]:
    """(RTT in ms, loss in %) the campaign sets for every case: twice its fixed netem delay,
    its fixed loss (0 where none)."""
    exp = c.index.get("experiment") or {}
    delay = exp.get("delay")
    loss = exp.get("loss")
    return (2 * (_time_ms(delay) or 0.0) if isinstance(delay, str) else 0.0,
            (_pct(loss) or 0.0) if isinstance(loss, str) else 0.0)


def sweeps(c: Campaign) -> list[Sweep]:
    """One Sweep per (base workload, MTU, offloads) measured at two or more scenarios."""
    family = int((c.index.get("experiment") or {}).get("family") or 4)
    base_rtt, _ = fixed(c)
    out = []
    # two or more scenarios: two or more RTTs or losses (a scenario is a pair of them)
    for g, scen, cases in by_method(c, scenario_of):
        rtts = sorted(dict.fromkeys(s[0] for s in scen), key=rtt_key)
        losses = sorted(dict.fromkeys(s[1] for s in scen), key=loss_key)
        methods = []
        for label, at in cases.items():
            m = Method(label, c.is_reference(label))
            for s, r in at:
                if m.mss is None:
                    m.mss = _mss(r, family)
                v = r.value(g.metric)
                if v is not None:
                    m.values.setdefault(s, []).append(v)
                    m.by_round.setdefault(r.repeat, {})[s] = v
            methods.append(m)
        ordered = sorted(methods, key=lambda m: not m.native)
        out.append(Sweep(g.workload, g.mtu, g.offloads, g.metric, g.unit, rtts, losses,
                         ordered, base_rtt))
    return out


def tables(s: Sweep, fixed_loss: float = 0.0) -> list[tuple[str, list[list[str]]]]:
    """(title, rows with the header first) of each table: against RTT at each loss (when the
    RTT axis has 2+ values), against loss at each RTT (when the loss axis has)."""
    out: list[tuple[str, list[list[str]]]] = []

    def table(title: str, along: list[tuple[str, str]], names: list[str]) -> None:
        head = (["method"] + [f"{s.metric} at {n} ({s.unit})" for n in names]
                + [f"% of native at {n}" for n in names])
        rows = [head]
        for m in s.methods:
            rows.append([m.tunnel] + [num(m.mean(p)) for p in along]
                        + [("100% (reference)" if m.native else share_text(s.share(m, p)))
                           for p in along])
        model = [s.model(s.methods[0], p, fixed_loss) for p in along] if s.methods else []
        if any(v is not None for v in model):
            rows.append(["Mathis model (MSS/RTT × 1.22/√p)"] + [num(v) for v in model]
                        + ["" for _ in along])
        out.append((title, rows))

    if len(s.rtts) > 1:
        for loss in s.losses:
            table("against RTT" + (f", loss {loss}" if loss else ""),
                  [(r, loss) for r in s.rtts], [r or "-" for r in s.rtts])
    if len(s.losses) > 1:
        for rtt in s.rtts:
            table("against loss" + (f", RTT {rtt}" if rtt else ""),
                  [(rtt, lo) for lo in s.losses], [lo or "-" for lo in s.losses])
    return out


def section_html(c: Campaign) -> str:
    """The report's distance-and-loss section ('' for a campaign off the RTT / loss axes)."""
    _, fixed_loss = fixed(c)
    return axis_section(
        "<h2 id=distance>Distance and loss</h2><p>Each scenario is an RTT and/or a "
        "random loss set by netem on both underlay ends (an RTT of X: a delay of X/2 on "
        "each; docs/methodology.md, \"RTT and loss as axes\"), every method measured at "
        "each in the same round, native first. Figures are means over rounds; the share "
        "of native is the geometric mean of each round's ratio to native at the same "
        "scenario (lowest-highest round; n rounds). The Mathis row is the TCP model's "
        "rate for one flow (MSS/RTT × √(3/2)/√p, MSS from the tunnel MTU of the first "
        "method listed) where loss and RTT are above 0: a reference, not a bound (CUBIC "
        "is not Reno; netem drops whole GSO packets, so segments are lost less often "
        "than p).</p>",
        ((f"{where(s.workload, s.mtu, s.offloads)}: {title}", cells)
         for s in sweeps(c) for title, cells in tables(s, fixed_loss)))
