"""Take-aways that compare tunnels with each other, recomputed from recorded campaigns:

- `offloads`: `--tunnels native,vxlan --offloads default,no-tso-gro --duration 2 --repeats 2`;
- `kinds`: `--tunnels native,vxlan,wireguard,ipsec,ovs-vxlan --workloads stream --duration 3
  --repeats 2` (OVS userspace datapath next to kernel VXLAN);
- `encrypted-streams`: tests/data/experiments/encrypted-streams.toml (wireguard-go and
  libipsec at 1, 4 and 16 streams).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from tunbench.report import build, data, peers
from tunbench.results import reader, records
from tunbench.results.model import CASE_FORMAT


def _values(root: Path, metric: str) -> dict[tuple[str, str, int], list[float]]:
    """(tunnel, offload variant, streams) -> values over repeats."""
    out: dict[tuple[str, str, int], list[float]] = {}
    for p in sorted((root / "cases").glob("*.json")):
        d = reader.read_json(p, CASE_FORMAT)
        if d["status"] == "ok":
            c = d["case"]
            # the name the report shows ('wireguard (go)'): records.identity
            out.setdefault((records.identity(c["tunnel"])["display"], c["offloads"]["name"],
                            c["workload"]["params"]["streams"]), []).append(
                d["metrics"][metric]["value"])
    return out


def _apart(a: list[float], b: list[float]) -> bool:
    def ci(v: list[float]) -> tuple[float, float]:
        h = sps.t.ppf(0.975, len(v) - 1) * statistics.stdev(v) / len(v) ** 0.5
        return statistics.fmean(v) - h, statistics.fmean(v) + h
    (la, ha), (lb, hb) = ci(a), ci(b)
    return ha < lb or hb < la


def test_offload_variant_against_default(built: Callable[[str], build.Report]) -> None:
    rep = built("offloads")
    root = rep.html.parent.parent
    vals = _values(root, "throughput")
    take = next(t for t in rep.takeaways if t.topic == "offloads")
    assert take.facts["scenario"] == ("stream", 1500, "no-tso-gro")
    for tun in ("native", "vxlan"):
        base, var = vals[(tun, "default", 1)], vals[(tun, "no-tso-gro", 1)]
        change = 100 * (statistics.fmean(var) / statistics.fmean(base) - 1)
        f = take.facts["changes"][tun]
        assert f["change_pct"] == pytest.approx(change)
        assert f["significant"] == _apart(base, var)
        assert f"{tun} {change:+.1f}%" in take.text


def test_ovs_against_linux_tunnels_in_cpu_per_gbit(built: Callable[[str], build.Report]) -> None:
    rep = built("kinds")
    root = rep.html.parent.parent
    vals = _values(root, "cpu_per_gbit")
    take = next(t for t in rep.takeaways if t.topic == "ovs-vs-linux")
    # only the unencrypted ones are compared: OVS against kernel VXLAN
    assert set(take.facts["ratios"]) == {"ovs-vxlan (netdev)/vxlan"}
    ratio, sig = take.facts["ratios"]["ovs-vxlan (netdev)/vxlan"]
    o, v = vals[("ovs-vxlan (netdev)", "default", 1)], vals[("vxlan", "default", 1)]
    assert ratio == pytest.approx(statistics.fmean(o) / statistics.fmean(v))
    assert sig == _apart(o, v)
    assert f"ovs-vxlan (netdev) needs {ratio:.2f}× the CPU per Gbit/s of vxlan" in take.text


def test_encrypting_tunnels_by_stream_count(built: Callable[[str], build.Report]) -> None:
    rep = built("encrypted-streams")
    root = rep.html.parent.parent
    vals = _values(root, "throughput")
    take = next(t for t in rep.takeaways if t.topic == "encrypted-by-streams")
    leaders: dict[int, Any] = take.facts["leaders"]
    assert sorted(leaders) == [1, 4, 16]
    for n, (lead, sig) in leaders.items():
        means = {t: statistics.fmean(vals[(t, "default", n)]) for t in ("wireguard (go)", "ipsec (libipsec)")}
        assert lead == max(means, key=lambda t: means[t])
        other = min(means, key=lambda t: means[t])
        assert sig == _apart(vals[(lead, "default", n)], vals[(other, "default", n)])
    expect = [b for a, b in zip([1, 4, 16], [4, 16]) if leaders[a][0] != leaders[b][0]]
    assert take.facts["changes"] == expect
    if expect and not any(leaders[x][1] for x in expect):
        assert "no such change is significant" in take.text
    assert "native" not in take.text


def test_ssh_kinds_are_encrypting(campaign: Callable[[str], Path]) -> None:
    """The report's encryption test on recorded kinds: ssh-forward encrypts (the old exact
    match on 'ssh' missed ssh-tun and ssh-forward), vxlan and native do not."""
    c = data.load(campaign("encrypted"))
    assert peers.encrypts(c, "ssh-forward") and peers.encrypts(c, "wireguard (go)")
    assert peers.encrypts(c, "ipsec (libipsec)") and not peers.encrypts(c, "native")
    k = data.load(campaign("kinds"))
    assert not peers.encrypts(k, "vxlan") and not peers.encrypts(k, "ovs-vxlan (netdev)")
