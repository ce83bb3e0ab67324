"""bench/bench_ovs_port_order.py replays OVS 3.1's datapath port numbering from link names:
checked against the numbers real ovs-vswitchd gave (dpctl/show captured in tests/data/ovs,
ports added the old way, a bridge and its port in one transaction)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tunbench.tunnels.ovs import parse_dpctl_show

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ovs"


def _bench():   # bench/ is not a package
    spec = importlib.util.spec_from_file_location("bench_ovs_port_order",
                                                  ROOT / "bench" / "bench_ovs_port_order.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", sorted(DATA.glob("dpctl-show-s-*.txt")), ids=lambda p: p.stem)
def test_replayed_numbers_match_real_ovs(path: Path) -> None:
    bench = _bench()
    ports = {name: p["port"] for name, p in parse_dpctl_show(path.read_text()).items()}
    (rid,) = {m.group(1) for n in ports if (m := re.match(r"tb(\w+)ov$", n))}
    inner, tun = f"tb{rid}ov", f"tb{rid}tn"
    predicted = bench.inner_port_number(inner, tun)
    assert predicted in (3, 4, None)
    if predicted is not None:   # None: the names share a bucket, OVSDB's row order decides
        assert ports[inner] == predicted, (ports, predicted)
    # the PHY bridge's pair, added the same way: its order by name when not in one bucket
    order, shared = bench.hmap_order([(n, bench.hash_string(n))
                                      for n in (f"tb{rid}ph", f"tb{rid}ub")])
    if not shared:
        assert [ports[n] for n in order] == [1, 2], (ports, order)


def test_the_captured_cases_include_both_numberings() -> None:
    """Both outcomes occur in the captured output, so the check above covers 3 and 4."""
    seen: set[int] = set()
    for path in DATA.glob("dpctl-show-s-*.txt"):
        ports = parse_dpctl_show(path.read_text())
        seen.update(p["port"] for n, p in ports.items() if n.endswith("ov"))
    assert seen == {3, 4}
