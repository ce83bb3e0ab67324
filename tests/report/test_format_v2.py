"""Result format v2 (docs/results.md), both ways.

The recorded campaigns under tests/data/campaigns are format 1, kept unchanged as the golden
input. Read through the one reader they are upgraded to v2 (results/upgrade.py); written back
as v2 (store.rewrite) and read again they must give the report exactly the same tables,
sweeps, distributions, names and take-aways. The workloads' own Metric records must carry the
same base and dims as the upgrader decodes from the names they are stored under, so an old
file and a new one of the same measurement mean the same thing.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from tunbench.report import data, html, takeaways
from tunbench.results import reader, store
from tunbench.results.model import FORMAT_VERSION, MetricRecord, metric_records
from tunbench.results.upgrade import v1_metric_dims
from tunbench.runner import metric_record
from tunbench.workloads import latency, loss_search
from tunbench.workloads.base import Metric

DATA = Path(__file__).resolve().parents[1] / "data" / "campaigns"
SRC = Path(__file__).resolve().parents[2] / "src" / "tunbench"
# every kind of report data: plain, MTU, sweeps (workload and tunnel), latency
# distributions, loss search (NDR/PDR dims), v1 files without implementation names
GOLDEN = ("idle", "mtu", "sweep", "ecmp", "encrypted-streams", "latency", "loss", "v1-impls")


def _seen(c: data.Campaign) -> dict[str, Any]:
    """What the report computes from a campaign, as comparable values."""
    return {
        "rows": sorted(json.dumps(r.to_dict(), sort_keys=True, default=str) for r in c.rows),
        "headline": {w: data.headline_metric(c, w) for w in c.workloads()},
        "sweeps": [(s.workload, s.param, s.mtu, s.over, s.units, s.points)
                   for s in data.sweeps(c)],
        "dists": [(scen, d.name, d.unit, d.quantiles, d.samples, d.counts)
                  for scen in c.scenarios() for d in data.distributions(c, scen)],
        "ndr": [data.ndr_metrics(c, (r.metric for r in c.rows
                                     if (r.workload, r.mtu, r.offloads) == scen))
                for scen in c.scenarios()],
        "names": {r.metric: (c.display(r.metric), c.unit_label(r.metric, r.unit))
                  for r in c.rows},
        "tunnels": [(t, c.kind_of(t), c.encrypts(t)) for t in c.tunnels()],
        "takeaways": [repr(t) for t in takeaways.compute(c)],
        "tables": html.summary_tables(c),
    }


@pytest.mark.parametrize("name", GOLDEN)
def test_v1_folder_and_its_v2_rewrite_give_the_same_report(name: str, tmp_path: Path) -> None:
    src = DATA / name
    assert json.loads((src / "index.json").read_text())["format_version"] == 1   # golden
    v2 = store.rewrite(src, tmp_path / name)
    for p in [v2 / "index.json", *(v2 / "cases").glob("*.json")]:
        assert json.loads(p.read_text())["format_version"] == FORMAT_VERSION == 2, p
    old, new = data.load(src), data.load(v2)
    assert len(new.cases) == len(old.cases) > 0
    seen_old, seen_new = _seen(old), _seen(new)
    for key in seen_old:
        assert seen_new[key] == seen_old[key], key


def test_v2_case_files_describe_themselves(tmp_path: Path) -> None:
    v2 = store.rewrite(DATA / "loss", tmp_path / "loss")
    doc = json.loads(next((v2 / "cases").glob("*loss-search*.json")).read_text())
    m = doc["metrics"]["lat_p99_us_at_10pct_ndr_imix"]
    assert (m["base"], m["dims"]) == ("latency", {"q": 99.0, "goal": "ndr", "load_pct": 10,
                                                  "size": "imix"})
    assert doc["metrics"]["ndr_mbps_l2_361"]["dims"] == {"goal": "ndr", "size": "361",
                                                         "layer": "l2"}
    assert doc["metrics"]["cpu_busy"]["dims"] == {}
    w, t = doc["case"]["workload"], doc["case"]["tunnel"]
    assert w["headline"][0] == "ndr_pps_imix" and w["sweep_param"] is None
    assert {"impl", "encrypts", "display"} <= set(t)


def test_upgrader_decodes_every_v1_name_family() -> None:
    assert v1_metric_dims("throughput") == ("throughput", {})
    assert v1_metric_dims("tcp_rtt_p99_9") == ("tcp_rtt", {"q": 99.9})
    assert v1_metric_dims("udp_rtt_mean") == ("udp_rtt", {"stat": "mean"})
    assert v1_metric_dims("throughput@streams8") == ("throughput", {"streams": 8})
    assert v1_metric_dims("rfc2544_pps_imix") == ("rate_pps", {"goal": "rfc2544",
                                                               "size": "imix"})
    assert v1_metric_dims("lat_p50_us_at_pdr_361") == (
        "latency", {"q": 50.0, "goal": "pdr", "size": "361"})
    assert v1_metric_dims("max_offered_pps_imix") == ("max_offered_pps", {"size": "imix"})
    assert v1_metric_dims("ndr@size1518") == ("ndr", {"size": "1518"})
    assert v1_metric_dims("latency_p50") == ("latency", {"q": 50.0})


def _same_as_upgrader(metrics: dict[str, Metric]) -> None:
    assert metrics
    for key, m in metrics.items():
        rec = metric_record(key, m)
        assert (rec.base, rec.dims) == v1_metric_dims(key), key


def test_workloads_emit_the_dims_the_upgrader_decodes() -> None:
    """A v2 file written today and a v1 file upgraded say the same of the same key."""
    class Trial:
        latency_us = {"p50": 10.0, "p90": 20.0, "p99": 30.0}
    for goal in ("ndr", "pdr", "rfc2544"):
        for size in ("imix", "361"):
            _same_as_upgrader(loss_search.rate_metrics(goal, size, 1e5, 361.0))
            _same_as_upgrader(loss_search.latency_metrics(goal, size, Trial()))
    _same_as_upgrader(loss_search.latency_metrics("ndr", "imix", Trial(), 10.0,
                                                  ("p50", "p90", "p99")))
    _same_as_upgrader({f"tcp_rtt_{n}": Metric(1.0, "µs", False, base="tcp_rtt",
                                              dims=latency.rtt_dims(n))
                       for n, _ in latency.STATS})


def test_a_plain_named_metric_still_works() -> None:
    """A workload that sets Metric(value, unit) with no base/dims (as another branch's
    udp-rate does) is stored as its own base with no dims, and named by its key."""
    rec = metric_record("udp_goodput", Metric(812.5, "Mbit/s"))
    assert rec == MetricRecord("udp_goodput", 812.5, "Mbit/s", True, None, {})
    doc = {"metrics": {"udp_goodput": rec.to_dict()}}
    assert metric_records(doc)["udp_goodput"] == rec


def test_newer_version_is_refused_and_v1_index_upgrades(tmp_path: Path) -> None:
    index = json.loads((DATA / "idle" / "index.json").read_text())
    assert reader.upgrade(dict(index), "tunbench-campaign", tmp_path)["format_version"] == 2
    with pytest.raises(reader.ResultError, match="newer than this tunbench"):
        reader.upgrade({**index, "format_version": 3}, "tunbench-campaign", tmp_path)
    with pytest.raises(reader.ResultError, match="exists"):
        store.rewrite(DATA / "idle", tmp_path)


REGISTRIES = ("tunbench.workloads", "tunbench.tunnels", "tunbench.registry")


def _imports(path: Path) -> list[str]:
    """Absolute module names a module imports (relative imports resolved)."""
    pkg = ["tunbench", *path.relative_to(SRC).parent.parts]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return out


def test_the_report_imports_no_registry() -> None:
    """A case file says what it means; the report never asks a live registry."""
    found = [(p.name, m) for p in sorted((SRC / "report").rglob("*.py")) for m in _imports(p)
             if any(m == r or m.startswith(r + ".") for r in REGISTRIES)]
    assert found == []
    # the check itself sees relative imports
    assert "tunbench.workloads" in _imports(SRC / "runner.py")
