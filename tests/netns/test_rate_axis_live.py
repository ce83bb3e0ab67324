"""The underlay rate as a campaign axis on real namespaces (testbed/wanaxis.py): a campaign
at rate 100mbit and 1gbit runs native and vxlan (1 round, 1 s a case); while each case runs,
each site's namespace is read every 100 ms with `tc -n NS qdisc show`: its underlay has a
root tbf at the case's rate; every case is ok, native first at each rate, the rate recorded
in the case (`case.rate`, `testbed.rate`) and in the experiment (the list); nothing is left
after (the namespaces, and with them their qdiscs, are gone); the report has the "Underlay
rate" section and the throughput-vs-rate figure. A correctness test: the figures are printed
and recorded, not asserted (the tbf rate on a veth bounds them, what matters here is that
each case ran on its rate)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from nswatch import NamespaceWatcher

from tunbench import proc, rates, runner, spec
from tunbench.report import axes, build, data

pytestmark = pytest.mark.correctness

RATES = ("100mbit", "1gbit")
TBF = re.compile(r"^qdisc tbf \S+ (?:dev (\S+) )?root .*?\brate (\S+)", re.M)


class Watcher(NamespaceWatcher):
    """Every 100 ms while a campaign runs: the root tbf of each interface in each namespace
    the campaign creates, by (run id, site): {(device, rate in Mbit/s)}."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[str, str], set[tuple[str, float]]] = {}

    def probe(self, ns: str, rid: str, site: str) -> None:
        r = proc.run(["tc", "-n", ns, "qdisc", "show"], check=False, timeout=10)
        for dev, rate in TBF.findall(r.stdout):
            self.seen.setdefault((rid, site), set()).add((dev, rates.rate_mbps(rate.lower())))


def test_each_case_runs_on_its_rate(tmp_path: Path, record_property: Any) -> None:
    exp = spec.build({"experiment": {"repeats": 1, "duration": 1, "warmup": 0,
                                     "rate": list(RATES)},
                      "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                      "workload": [{"name": "stream"}]}, "test")
    assert exp.rates == RATES and exp.rate is None
    with Watcher() as w:
        runner.run_campaign(exp, tmp_path)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["experiment"]["rate"] == list(RATES)
    cases = [json.loads(p.read_text()) for p in sorted((tmp_path / "cases").glob("*.json"))]
    assert [c["status"] for c in cases] == ["ok"] * 4, [c.get("error") for c in cases]
    assert [(c["case"]["rate"], c["case"]["tunnel"]["kind"]) for c in cases] == \
        [("100mbit", "native"), ("100mbit", "vxlan"), ("1gbit", "native"), ("1gbit", "vxlan")]
    for c in cases:
        rate, rid = c["case"]["rate"], c["testbed"]["run_id"]
        assert c["case"]["id"].endswith(f"-rate{rate}-r1") and c["testbed"]["rate"] == rate
        for site in ("a", "b"):   # while it ran: its underlay shaped to the case's rate
            seen = w.seen.get((rid, site), set())
            assert {mbps for _, mbps in seen} == {rates.rate_mbps(rate)}, (c["case"]["id"],
                                                                           site, seen)
    # nothing is left: the namespaces (and the qdiscs on their links) are gone
    assert not w.left()
    # the report: the section and the figure against rate
    (s,) = axes.rate_alongs(data.load(tmp_path))
    assert s.values == list(RATES) and [m.tunnel for m in s.methods] == ["native", "vxlan"]
    rep = build.build(tmp_path)
    page = rep.html.read_text()
    assert "<h2 id=rate>Underlay rate</h2>" in page and "stream: against rate" in page
    (fig,) = [f for f in rep.figures if f.name.startswith("rate-")]
    assert fig.png.stat().st_size > 0 and not fig.overlaps
    figures = {m.tunnel: {x: m.mean(x) for x in s.values} for m in s.methods}
    record_property("rate_axis_figures", json.dumps(figures))
    print("rate axis figures (Mbit/s):", json.dumps(figures))
