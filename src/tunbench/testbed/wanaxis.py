"""RTT, loss and the underlay rate as campaign axes: each value a scenario, set on the underlay
per case (netem for RTT and loss, tbf for the rate).

    [experiment]
    rtt = ["0ms", "20ms", "80ms"]   # --rtts 0ms,20ms,80ms
    loss = ["0%", "0.1%"]           # --losses 0%,0.1%  (a string: one loss for every case)
    rate = ["100mbit", "1gbit"]     # --rates 100mbit,1gbit  (a string: one rate, --rate)

With both, every (rtt, loss) pair is a scenario. Each round measures every method at each
scenario in turn, native first (plan.py), so a method at 20 ms meets native at 20 ms of the
same round. An RTT of X is a netem delay of X/2 on each underlay end (egress), so a round trip
crosses both; a loss of p is netem random loss p on each end, so the data packets of a flow
meet p (and its ACKs p). "0ms" / "0%" add nothing: that scenario has no netem for that part
(with neither, the underlay is as without the axis). The campaign-wide `loss`, `jitter` and
`netem_rate` (netem.py) combine with an RTT axis only where they make sense: a fixed `delay`
or `jitter` with `rtt` is refused (give one), a fixed rate applies at every value.

netem must be in the kernel that runs the sites: locally, the axis is refused in one line
before anything changes when it is not (capabilities.kernel_missing, the check the
campaign-wide --delay uses); between hosts, each host's kernel is checked when connected.

The rate axis is the campaign-wide `rate` (tbf on each underlay end, testbed/local.py) made a
list: each case's underlay is shaped to its rate, native first at each. It needs tbf only (no
netem), so it runs on a kernel without netem; it is one axis per campaign with the RTT and
loss axes (give either: the report draws each against one axis), and combines with a fixed
netem (`delay`, `loss`) as `--rate` does (netem at the root, tbf below it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..rates import rate_mbps
from .netem import LOSS_RE, RATE_RE, TIME_MAX_S, TIME_RE, Netem, seconds

RTT, LOSS, RATE = "rtt", "loss", "rate"
FLAGS = {RTT: "--rtts", LOSS: "--losses", RATE: "--rates"}
EXAMPLES = {RTT: '["0ms", "20ms", "80ms"]', LOSS: '["0%", "0.1%"]', RATE: '["100mbit", "1gbit"]'}


@dataclass(frozen=True)
class Axes:
    """The values of each axis in the order given; () when not on that axis."""
    rtts: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    rates: tuple[str, ...] = ()


def is_axis(value: Any) -> bool:
    """experiment.loss as a list is the loss axis; as a string one loss for every case."""
    return isinstance(value, list | tuple)


def asked(exp: dict[str, Any]) -> bool:
    """Whether [experiment] asks for an RTT, loss or rate axis (its values not yet checked)."""
    return RTT in exp or is_axis(exp.get(LOSS)) or is_axis(exp.get(RATE))


def rtt_ms(value: str) -> float:
    return seconds(value) * 1000.0


def loss_pct(value: str) -> float:
    m = LOSS_RE.match(value)
    if not m:
        raise ValueError(value)
    return float(m.group(1))


def rate_ok(v: Any) -> bool:
    """A tc rate string above zero (tbf cannot shape at 0)."""
    return isinstance(v, str) and RATE_RE.match(v) is not None and rate_mbps(v) > 0


NORM = {RTT: rtt_ms, LOSS: loss_pct, RATE: rate_mbps}   # a value as a number, for duplicates


def _parse(raw: Any, key: str, where: str, problems: list[str]) -> tuple[str, ...]:
    """The values of one axis in the order given, or () with one problem naming the fix."""
    if not is_axis(raw) or not raw:
        problems.append(f"{where} must be a non-empty list like {EXAMPLES[key]}")
        return ()
    out: list[str] = []
    for v in raw:
        if key == RTT:
            ok = isinstance(v, str) and TIME_RE.match(v) is not None
            if ok and seconds(v) / 2 > TIME_MAX_S:
                problems.append(f"{where} {v} is longer than {2 * TIME_MAX_S:g}s")
                return ()
            what = "an RTT like 0ms, 20ms or 0.5s"
        elif key == RATE:
            ok = rate_ok(v)
            what = "a rate above 0 like 100mbit or 1gbit"
        else:
            ok = isinstance(v, str) and LOSS_RE.match(v) is not None and loss_pct(v) < 100
            what = "a loss from 0% to below 100% like 0.1%"
        if not ok:
            problems.append(f"{where} value {v!r} is not {what}")
            return ()
        norm = NORM[key](v)
        if any(NORM[key](o) == norm for o in out):
            problems.append(f"{where} lists {v} twice: give each value once")
            return ()
        out.append(v)
    return tuple(out)


def parse(exp: dict[str, Any], named: Any, problems: list[str], *, hub: bool, mesh: bool,
          cores: bool, sequential: bool, local: bool) -> Axes:
    """The axes of [experiment] (each () when not on that axis), and what they do not
    combine with, each refused naming the fix. `local`: the sites are this host's namespaces,
    so this kernel must have netem (for an RTT or loss above 0)."""
    def spot(key: str) -> str:   # a flag sets an axis by its plural (--losses, not --loss)
        where = str(named(key))
        return FLAGS.get(key, where) if where.startswith("--") else where

    before = len(problems)
    rtts = _parse(exp[RTT], RTT, spot(RTT), problems) if RTT in exp else ()
    losses = _parse(exp[LOSS], LOSS, spot(LOSS), problems) \
        if is_axis(exp.get(LOSS)) else ()
    rates = _parse(exp[RATE], RATE, spot(RATE), problems) if is_axis(exp.get(RATE)) else ()
    if len(problems) > before:   # a bad value is named alone
        return Axes()
    if not rtts and not losses and not rates:
        return Axes()
    asked = _joined([spot(k) for k, v in ((RTT, rtts), (LOSS, losses), (RATE, rates)) if v])
    if rates and (rtts or losses):
        wan = _joined([spot(k) for k, v in ((RTT, rtts), (LOSS, losses)) if v])
        problems.append(f"{spot(RATE)} and {wan} are both axes of scenarios: run one per "
                        "campaign (the report draws each method against one axis)")
    if rtts:
        for key in ("delay", "jitter"):
            if exp.get(key) is not None:
                problems.append(f"{spot(key)} and {spot(RTT)} both set the delay: give the "
                                "RTTs only (each is a delay of half of it on each end)")
    shape = "a hub testbed" if hub else "a mesh testbed" if mesh else ""
    if shape:
        problems.append(f"{asked} runs on two sites (here or on hosts), not on {shape}: "
                        "leave out one of them")
    if cores:
        problems.append(f"{asked} and {spot('cpus_per_site')} are both axes of scenarios: "
                        "run one per campaign")
    if sequential:
        problems.append(f"{asked} needs fixed rounds: add repeats (--repeats N)")
    if len(problems) > before:
        return Axes()
    needs = any(rtt_ms(v) > 0 for v in rtts) or any(loss_pct(v) > 0 for v in losses)
    if local and needs:
        missing = kernel_missing()
        if missing:
            problems.append(f"{asked} needs netem, which this kernel lacks "
                            "(CONFIG_NET_SCH_NETEM): run this campaign in the VM lab "
                            "(docs/vmlab.md) or between real hosts ([sites], docs/remote.md)")
            return Axes()
    return Axes(rtts, losses, rates)


def _joined(spots: list[str]) -> str:
    """The axes named once: 'f.toml: experiment.rtt/loss', '--rtts/--losses'."""
    if len(spots) > 1 and all("experiment." in x for x in spots) \
            and len({x.rsplit(".", 1)[0] for x in spots}) == 1:
        return spots[0] + "".join(f"/{x.rsplit('.', 1)[1]}" for x in spots[1:])
    return "/".join(spots)


def kernel_missing() -> str | None:
    """Why this kernel cannot run netem (None: it can): the check --delay's preflight makes."""
    from ..capabilities import kernel_missing as missing
    m = missing("CONFIG_NET_SCH_NETEM", "netem WAN emulation (--rtts, --losses)", "sch_netem")
    return m.one_line() if m else None


def half(rtt: str) -> str:
    """The one-way delay of each end for an RTT (netem's own units)."""
    us = round(seconds(rtt) * 1e6 / 2)
    return f"{us // 1000}ms" if us % 1000 == 0 else f"{us}us"


def case_netem(base: Netem | None, rtt: str, loss: str) -> Netem | None:
    """The netem of one case: the campaign's (rate, a fixed loss or delay) with the case's
    RTT (half on each end) and loss; None when nothing is left to emulate."""
    net = base or Netem()
    if rtt:
        net = replace(net, delay=half(rtt) if rtt_ms(rtt) > 0 else None)
    if loss:
        net = replace(net, loss=loss if loss_pct(loss) > 0 else None)
    return net if net.active else None


def case_tag(rtt: str, loss: str, rate: str = "") -> str:
    """The case id's part ('-rtt20ms', '-loss0.1pct', '-rate100mbit'; '%' stays out of file
    names and links)."""
    return ((f"-rtt{rtt}" if rtt else "") + (f"-loss{loss.replace('%', 'pct')}" if loss else "")
            + (f"-rate{rate}" if rate else ""))


def scenario_tag(rtt: str | None, loss: str | None, rate: str | None = None) -> str:
    """How a case's scenario is named in tables ('rtt=20ms loss=0.1%', 'rate=100mbit')."""
    return " ".join(f"{k}={v}" for k, v in ((RTT, rtt), (LOSS, loss), (RATE, rate)) if v)
