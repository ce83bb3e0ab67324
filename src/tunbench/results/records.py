"""Typed records of a result folder, what every consumer (report, compare, trend, the store,
exports) reads instead of indexing case documents: a campaign, its cases, each case's metrics
(results/model.MetricRecord: base, dims, unit, direction), its tunnel and workload identity,
and the campaign's fingerprint. results/reader.read_records builds them; docs/results.md
describes them.

A case's identity is named the way every table shows it, once, here:

- the tunnel by its display name ('wireguard (go)'), one name per label over the campaign
  (`name_tunnels`);
- the workload by its direction when it ran reversed or both ways ('stream reverse',
  iperf3 -R / --bidir: `name_directions`), never pooled with the forward direction;
- one value of a workload swept across cases ('stream streams=4') as its own scenario
  (`split_sweeps`);
- one core count of the site-size axis ('stream cpus_per_site=1') as its own scenario
  (`name_cores`);
- one value of the RTT / loss axes ('stream rtt=20ms loss=0.1%') as its own scenario
  (`name_wan`).

These work on the documents before they are typed (an older file is upgraded by the reader
first); the records keep the named document in `doc` for what has no typed field yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .model import (
    MetricRecord,
    by_best_second,
    case_stem,
    metric_records,
    own_share,
    paired_value,
    slowed_rounds,
)

Scenario = tuple[str, int, str]   # workload name, underlay MTU, offload variant


@dataclass(frozen=True)
class Aggregation:
    """A tunnel kind that packs several inner packets into one outer one, as its driver
    declared it (TunnelDriver.aggregates): the parameter holding the flush timeout (µs, 0 =
    no aggregation) and the kind of the same encapsulation without aggregation that its
    trade-off is measured against."""
    param: str
    baseline: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"param": self.param, "baseline": self.baseline}


@dataclass(frozen=True)
class TunnelIdentity:
    label: str                      # the name tables show: the display name after naming
    kind: str
    impl: str | None
    encrypts: bool
    display: str
    given_label: str                # the label the experiment gave
    params: dict[str, Any] = field(default_factory=dict)
    carries: tuple[str, ...] | None = None     # tcp, udp, l2; None: not recorded
    kernel_datapath: bool | None = None        # None: not recorded
    aggregation: Aggregation | None = None
    base: str | None = None         # a tunnel sweep's curve name ('wireguard (go)')
    sweep: dict[str, Any] = field(default_factory=dict)   # {"tunnels": 2}

    @property
    def native(self) -> bool:
        return self.kind == "native"

    @property
    def flush_us(self) -> int | None:
        """The aggregation timeout of an aggregating kind (its declared parameter), else None."""
        if self.aggregation is None:
            return None
        v = self.params.get(self.aggregation.param)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def sweep_point(self) -> tuple[str, str, int] | None:
        """(curve name, parameter, value) of one value of a recorded tunnel sweep."""
        if len(self.sweep) != 1:
            return None
        (param, value), = self.sweep.items()
        if not isinstance(value, int):
            return None
        return str(self.base or self.kind), str(param), value


@dataclass(frozen=True)
class WorkloadIdentity:
    name: str                       # the scenario's name: 'stream', 'stream reverse', ...
    base: str                       # the workload itself ('stream')
    label: str                      # the label the experiment gave (else the name)
    params: dict[str, Any] = field(default_factory=dict)
    headline: tuple[str, ...] = ()  # metric keys it is judged by, best first
    sweep_param: str | None = None  # its list parameter
    axes: tuple[str, ...] = ()      # parameters that place it on an x axis
    sweep: dict[str, Any] = field(default_factory=dict)   # the swept point {"streams": 4}
    direction: str | None = None    # 'reverse' (site b sends), 'bidir', None (a sends)

    @property
    def sweep_value(self) -> Any:
        """The value of its declared list parameter, if any."""
        return self.params.get(self.sweep_param) if self.sweep_param else None


@dataclass(frozen=True)
class CaseRecord:
    id: str
    path: str                       # relative to the campaign folder ('cases/0001-....json')
    status: str                     # ok, failed, skipped
    tunnel: TunnelIdentity
    workload: WorkloadIdentity
    mtu: int
    offloads: str                   # the offload variant's name
    repeat: int | None
    metrics: dict[str, MetricRecord]
    error: str | None = None
    error_log: str | None = None
    started: float | None = None
    ended: float | None = None
    topology: str | None = None     # a chain campaign: 'direct' or 'chain'
    series: dict[str, list[float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # sub-documents as recorded (docs/results.md: testbed, tunnel state, CPU, offloads)
    testbed: dict[str, Any] = field(default_factory=dict)
    tunnel_state: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, Any] = field(default_factory=dict)
    offload_state: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    chain: dict[str, Any] = field(default_factory=dict)
    hub: dict[str, Any] = field(default_factory=dict)
    # full samples a workload recorded: {name: {"unit", "values" | "percentiles"}}
    distributions: dict[str, Any] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # the rates whose best second says the host slowed this case for its whole window
    # (model.slowed_rounds over the campaign's rounds, marked by `named`): left out of shares
    slowed: frozenset[str] = frozenset()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def native_run(self) -> int:
        """Which of its round's native runs this case is (plan.spread_natives); 1 for every
        other case and for a campaign with one native per round."""
        return int((self.doc.get("case") or {}).get("native_run") or 1)

    @property
    def scenario(self) -> Scenario:
        return (self.workload.name, self.mtu, self.offloads)

    def value(self, metric: str) -> float | None:
        m = self.metrics.get(metric)
        return None if m is None else m.value

    def paired(self, metric: str) -> float | None:
        """The value this case's round pairs against native's (model.paired_value: the best
        second of a rate recorded with its per-second series, else the value); None when the
        host slowed this case for its whole window (`slowed`): it pairs with nothing."""
        m = self.metrics.get(metric)
        if m is None or metric in self.slowed:
            return None
        return paired_value(m.value, m.higher_is_better, self.series.get(metric))

    def own_share(self, metric: str) -> float | None:
        """The share of native this case measured itself, native's bursts taken in turn with
        its own with the tunnel up (model.own_share, the case file's `paired_native`); None
        when it pairs with its round's native cases instead. Not left out when the host
        slowed the case's window: both sides of its bursts saw the same host."""
        return own_share(self.doc.get("paired_native"), metric)

    @property
    def rate(self) -> str | None:
        """The shaped underlay rate this case ran at (tbf), if any."""
        r = self.testbed.get("rate")
        return str(r) if r else None

    @property
    def shares_cpus(self) -> bool:
        return bool(self.testbed.get("shares_cpus"))

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> CaseRecord:
        """A case document as read (results/reader.py: checked and upgraded), and named; or
        one the runner has just written (the progress line)."""
        c = doc["case"]
        return cls(
            id=str(c.get("id", "")), path=str(doc.get("_path", "")),
            status=str(doc.get("status", "")),
            tunnel=_tunnel(c.get("tunnel") or {"label": "", "kind": ""}),
            workload=_workload(c["workload"]), mtu=int(c.get("mtu") or 0), offloads=str((c.get("offloads") or {}).get("name")),
            repeat=c.get("repeat"), metrics=metric_records(doc),
            error=doc.get("error"), error_log=doc.get("error_log"),
            started=doc.get("started"), ended=doc.get("ended"), topology=c.get("topology"),
            series=dict(doc.get("series") or {}), notes=tuple(str(n) for n in
                                                              doc.get("notes") or ()),
            testbed=dict(doc.get("testbed") or {}), tunnel_state=dict(doc.get("tunnel") or {}),
            cpu=dict(doc.get("cpu") or {}), offload_state=dict(doc.get("offloads") or {}),
            raw=dict(doc.get("raw") or {}), chain=dict(doc.get("chain") or {}),
            hub=dict(doc.get("hub") or {}),
            distributions=dict(doc.get("distributions") or {}), doc=doc)


def _tunnel(t: dict[str, Any]) -> TunnelIdentity:
    ident = identity(t)
    agg = t.get("aggregation")
    return TunnelIdentity(
        label=str(t["label"]), kind=str(t["kind"]), impl=ident["impl"],
        encrypts=ident["encrypts"], display=ident["display"],
        given_label=str(t.get("given_label", t["label"])), params=dict(t.get("params") or {}),
        carries=tuple(str(c) for c in t["carries"]) if isinstance(t.get("carries"), list)
        else None,
        kernel_datapath=t["kernel_datapath"] if isinstance(t.get("kernel_datapath"), bool)
        else None,
        aggregation=Aggregation(str(agg["param"]), agg.get("baseline"))
        if isinstance(agg, dict) and agg.get("param") else None,
        base=t.get("base"), sweep=dict(t.get("sweep") or {}))


def _workload(w: dict[str, Any]) -> WorkloadIdentity:
    return WorkloadIdentity(
        name=str(w["name"]), base=str(w.get("base", w["name"])),
        label=str(w.get("label") or w["name"]), params=dict(w.get("params") or {}),
        headline=tuple(w.get("headline") or ()), sweep_param=w.get("sweep_param"),
        axes=tuple(w.get("axes") or ()), sweep=dict(w.get("sweep") or {}),
        direction=w.get("direction"))


@dataclass
class CampaignRecord:
    root: Path
    index: dict[str, Any]
    cases: list[CaseRecord]
    missing: list[str] = field(default_factory=list)   # listed as recorded, file gone
    pending: list[str] = field(default_factory=list)   # listed, never recorded

    @property
    def experiment(self) -> dict[str, Any]:
        return dict(self.index.get("experiment") or {})

    @property
    def env(self) -> dict[str, Any]:
        return dict(self.index.get("env") or {})

    @property
    def name(self) -> str:
        return str(self.experiment.get("name") or self.root.name)

    @property
    def state(self) -> str:
        return str(self.index.get("state") or "unknown")

    @property
    def created(self) -> float | None:
        return self.index.get("created")

    @property
    def finished(self) -> float | None:
        return self.index.get("finished")

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What makes its figures comparable (results/fingerprint.py), as recorded or derived."""
        from . import fingerprint
        return fingerprint.of_index(self.index)

    @property
    def ok(self) -> list[CaseRecord]:
        return [r for r in self.cases if r.ok]


# -- naming, on the documents before they are typed ------------------------------------------

def identity(t: dict[str, Any]) -> dict[str, Any]:
    """{"impl", "encrypts", "display"} of a case's tunnel section, as recorded at write time
    (older files get them from the reader's upgrader, results/upgrade.py)."""
    return {"impl": t.get("impl"), "encrypts": bool(t.get("encrypts")),
            "display": str(t.get("display") or t["label"])}


def name_tunnels(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases whose tunnel label is the display name ('wireguard (go)'), with impl and
    encrypts, so every table, figure, export and take-away names the implementation. One
    label keeps one name: an old failed case that recorded no implementation takes the one
    its label's other cases recorded."""
    idents = [identity(d["case"]["tunnel"]) for d in cases]
    best: dict[str, dict[str, Any]] = {}
    for d, ident in zip(cases, idents, strict=True):
        label = d["case"]["tunnel"].get("given_label", d["case"]["tunnel"]["label"])
        if label not in best or (ident["impl"] and not best[label]["impl"]):
            best[label] = ident
    out = []
    for d in cases:
        t = d["case"]["tunnel"]
        label = t.get("given_label", t["label"])
        ident = best[label]
        named = {**t, **ident, "label": ident["display"], "given_label": label}
        base = t.get("given_base", t.get("base"))
        if base:   # a tunnel sweep's curve is named like its points: 'wireguard (go)'
            impl = ident["impl"]
            named.update(base=f"{base} ({impl})" if impl and ident["display"].endswith(
                f" ({impl})") else base, given_base=base)
        out.append({**d, "case": {**d["case"], "tunnel": named}})
    return out


DIRECTIONS = {"reverse": "reverse", "bidir": "bidir"}   # iperf3 -R / --bidir, as recorded


def direction(params: dict[str, Any]) -> str | None:
    """'reverse' (site b sends, iperf3 -R), 'bidir' (both at once) or None (a sends to b)."""
    return next((word for key, word in DIRECTIONS.items() if params.get(key) is True), None)


def name_directions(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases whose workload ran reversed or both ways are named so ('stream reverse'), in
    their scenario and their label: every table, figure, take-away and compare line says
    which way the traffic went, and never pools them with the forward direction."""
    out = []
    for d in cases:
        w = d["case"]["workload"]
        way = direction(w.get("params") or {})
        if way is None:
            out.append(d)
            continue
        named = {**w, "name": f"{w['name']} {way}", "direction": way}
        if w.get("label"):
            named["label"] = f"{w['label']} {way}"
        out.append({**d, "case": {**d["case"], "workload": named}})
    return out


def split_sweeps(cases: list[dict[str, Any]]) -> None:
    """A workload run at several values of a sweep parameter (e.g. streams 1, 4, 16) becomes
    one scenario per value ('stream streams=4'), so its tables and ratios never mix them."""
    for wl in dict.fromkeys(d["case"]["workload"]["name"] for d in cases):
        docs = [d for d in cases if d["case"]["workload"]["name"] == wl]
        axes = dict.fromkeys(p for d in docs for p in d["case"]["workload"].get("axes") or ())
        varying = [p for p in axes if len({json.dumps(
            (d["case"]["workload"].get("params") or {}).get(p)) for d in docs}) > 1]
        for d in docs if varying else ():
            w = d["case"]["workload"]
            point = {p: w["params"][p] for p in varying}
            label = wl + " " + " ".join(f"{p}={v}" for p, v in point.items())
            d["case"] = {**d["case"], "workload": {**w, "name": label, "base": wl,
                                                   "sweep": point}}


CORES = "cpus_per_site"   # the site-size axis (testbed/sitecores.py), as the case recorded it


def name_cores(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases measured at a number of cores per site (`case.cpus_per_site`, the site-size
    axis) are named so ('stream cpus_per_site=1'), in their scenario and label, and carry
    the count as a parameter on an axis of their workload (base: the workload), so tables
    and shares of native never pool two core counts (native at the same count, same round)
    and the report draws each method against cores like a sweep (report/data.sweeps)."""
    out = []
    for d in cases:
        k = d["case"].get(CORES)
        if not isinstance(k, int) or isinstance(k, bool):
            out.append(d)
            continue
        w = d["case"]["workload"]
        tag = f"{CORES}={k}"
        # base: the scenario without the count ('stream', 'stream reverse'), what the
        # figures and the scaling table group the counts by
        named = {**w, "name": f"{w['name']} {tag}", "base": w["name"],
                 "params": {**(w.get("params") or {}), CORES: k},
                 "axes": [*(a for a in w.get("axes") or () if a != CORES), CORES],
                 "sweep": {**(w.get("sweep") or {}), CORES: k}}
        named["label"] = f"{w.get('label') or w['name']} {tag}"
        out.append({**d, "case": {**d["case"], "workload": named}})
    return out


WAN_AXES = ("rtt", "loss", "rate")   # the axes of testbed/wanaxis.py, as the case recorded them


def name_wan(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases measured at a value of the RTT or loss axis (`case.rtt`, `case.loss`) are named
    so ('stream rtt=20ms loss=0.1%'), in their scenario and label (base: the workload), so
    tables and shares of native never pool two scenarios (native at the same RTT and loss,
    same round); report/distance.py draws each method against them. The values stay in the
    case (not a workload axis: 0ms is no point of a swept log axis)."""
    out = []
    for d in cases:
        vals = [(k, v) for k in WAN_AXES if isinstance(v := d["case"].get(k), str) and v]
        if not vals:
            out.append(d)
            continue
        w = d["case"]["workload"]
        tag = " ".join(f"{k}={v}" for k, v in vals)
        named = {**w, "name": f"{w['name']} {tag}", "base": w["name"],
                 "label": f"{w.get('label') or w['name']} {tag}"}
        out.append({**d, "case": {**d["case"], "workload": named}})
    return out


def named(docs: list[dict[str, Any]], *, sweeps: bool = True) -> list[CaseRecord]:
    """Case documents (as read) named as every table shows them, typed. `sweeps`: split a
    workload swept across cases into one scenario per value (the report, the store); the
    console summary of a run keeps them together and tabulates the sweep."""
    cases = name_wan(name_cores(name_directions(name_tunnels(docs))))
    if sweeps:
        split_sweeps(cases)
    return mark_slowed([CaseRecord.from_doc(d) for d in cases])


def mark_slowed(cases: list[CaseRecord]) -> list[CaseRecord]:
    """Each ok case's rates that the host slowed for the whole window, judged against the
    same case in the campaign's other rounds (model.slowed_rounds over the best seconds of
    the cases with one id stem)."""
    best: dict[tuple[str, str], dict[int, float]] = {}
    for i, c in enumerate(cases):
        if not c.ok or not c.id:
            continue
        for name, m in c.metrics.items():
            if (m.value is not None and c.own_share(name) is None
                    and by_best_second(m.higher_is_better, c.series.get(name))):
                v = c.paired(name)
                if v is not None:
                    best.setdefault((case_stem(c.id), name), {})[i] = v
    slowed: dict[int, set[str]] = {}
    for (_, name), vals in best.items():
        for i in slowed_rounds(vals):
            slowed.setdefault(i, set()).add(name)
    return [replace(c, slowed=frozenset(slowed[i])) if i in slowed else c
            for i, c in enumerate(cases)]
