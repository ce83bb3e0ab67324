"""A campaign run with -R or --bidir says so wherever it is read: the report's scenarios, the
console summary's titles and compare's sections name the direction (`stream reverse`), and a
reversed case is never pooled with forward ones. On a copy of a recorded campaign whose stream
cases are marked as iperf3 -R would have recorded them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import cli_inproc
from tunbench.report import console, data
from tunbench.results import reader


def _mark(root: Path, key: str, only_repeat: int | None = None) -> Path:
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        if only_repeat is None or d["case"]["repeat"] == only_repeat:
            d["case"]["workload"]["params"][key] = True
            p.write_text(json.dumps(d))
    return root


def test_reverse_is_named_in_scenarios_console_and_compare(
        campaign: Callable[[str], Path], capsys) -> None:
    a = _mark(campaign("basic"), "reverse")
    c = data.load(a)
    assert {s[0] for s in c.scenarios()} == {"stream reverse"}
    console.print_summary(reader.read_campaign(a).cases, str(a))
    out = capsys.readouterr().out
    assert "stream reverse - underlay MTU 1500" in out
    r = cli_inproc.tunbench("compare", a, a, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "stream reverse, MTU 1500" in r.stdout


def test_bidir_and_forward_never_pooled(campaign: Callable[[str], Path]) -> None:
    a = _mark(campaign("basic"), "bidir", only_repeat=1)
    c = data.load(a)
    assert [s[0] for s in c.scenarios()] == ["stream", "stream bidir"]
    n = {r.workload: r.stats.n for r in c.rows if (r.tunnel, r.metric) == ("vxlan",
                                                                           "throughput")}
    assert n == {"stream": 2, "stream bidir": 1}


def _separate_sites(root: Path, way: str | None) -> Path:
    """The recorded campaign as sites on separate hosts would have recorded it: each case's
    CPU record as each end's own (`cpu.sites`, the host's record for both: the two sites did
    share this host) and the per-site metrics the runner writes from it (runner._cpu_metrics),
    the workload marked as run `way` (iperf3 -R: 'reverse', --bidir)."""
    from tunbench.runner import _cpu_metrics
    from tunbench.workloads.base import Metric, Output
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        if d["status"] != "ok":
            continue
        cpu = {**d["cpu"], "shared_by_sites": False}
        cpu["sites"] = {"a": d["cpu"], "b": d["cpu"]}
        tput = d["metrics"]["throughput"]
        out = Output(metrics={"throughput": Metric(tput["value"], tput["unit"])})
        for key, rec in _cpu_metrics(cpu, out).items():
            d["metrics"][key] = rec.to_dict()
        d["cpu"], d["testbed"] = cpu, {**(d.get("testbed") or {}), "shares_cpus": False}
        if way:
            d["case"]["workload"]["params"][way] = True
        p.write_text(json.dumps(d))
    return root


def test_per_site_cpu_is_named_by_the_direction_the_case_recorded(
        campaign: Callable[[str], Path], capsys, tmp_path: Path) -> None:
    """Site a sends unless the workload ran reversed: the report's per-site CPU columns,
    the console's and the take-aways name each end by what it did in that run, never
    'sender (site a)' for a reversed one."""
    from tunbench.report import html, vs_native
    labels = {}
    for way in (None, "reverse", "bidir"):
        root = _separate_sites(campaign("basic"), way).rename(tmp_path / f"basic-{way}")
        c = data.load(root)
        page = html.summary_tables(c)
        console.print_summary(reader.read_campaign(root).cases, str(root))
        out = capsys.readouterr().out
        takes = [t.text for t in vs_native.cpu_per_gbit(c)]
        labels[way] = (page, out, takes)
    page, out, takes = labels[None]
    assert "CPU per Gbit/s, sender (site a)" in page and "CPU busy, receiver (site b)" in page
    # the console wraps its headers: each column's words, and the labels it is made from
    assert "(client)" in out and "sender" not in out and "receiver" not in out
    assert console.cpu_label("cpu_busy_a", None) == "CPU of site a (client)"
    assert any("on the sender (site a)" in t for t in takes), takes
    page, out, takes = labels["reverse"]
    assert "CPU per Gbit/s, receiver (site a)" in page
    assert "CPU per Gbit/s, sender (site b)" in page and "CPU busy, sender max" in page
    assert "sender (site a)" not in page and "receiver (site b)" not in page
    assert "receiver)" in out and "sender)" in out
    assert console.cpu_label("cpu_busy_a", "reverse") == "CPU of site a (client, receiver)"
    assert console.cpu_label("cpu_busy_b", "reverse") == "CPU of site b (server, sender)"
    assert any("on the receiver (site a)" in t for t in takes)
    assert not any("sender (site a)" in t for t in takes), takes
    page, out, takes = labels["bidir"]
    assert "CPU per Gbit/s, site a, sending and receiving" in page
    assert "sender" not in page.replace("sending", "") and "receiver" not in page
    assert "receiving)" in out
    assert console.cpu_label("cpu_busy_a", "bidir") == \
        "CPU of site a (client, sending and receiving)"
