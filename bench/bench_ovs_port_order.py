#!/usr/bin/env python3
"""Replay Open vSwitch 3.1's datapath port numbering from the link names a campaign recorded,
and print it next to each OVS case's measured RTT p50 (offline; no lock needed).

Why (tunnels/ovs.py, "Port order"): with one ovs-vsctl transaction per bridge and port,
ovs-vswitchd creates the two ports in the hash order of their names (bridge.c:
SHASH_FOR_EACH over the wanted ports, hash_string = murmur3 as lib/hash.h builds it without
SSE4.2), so the inner bridge port gets datapath number 3 or 4 by its name, which carries the
run id. dpif-netdev polls its ports in dp->ports hmap order (hash_int(port_no)), 0, 4, 1, 2, 3
for five ports: inner port 3 is polled after the underlay port (1 or 2), 4 before it. When
both names fall in one bucket of the 4-bucket shash, the order depends on the order OVSDB
hands the rows over (not in the case): "undecided".

usage: bench/bench_ovs_port_order.py RESULTS_DIR [RESULTS_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & M32


def _mhash_add(h: int, data: int) -> int:
    if data:
        data = _rot((data * 0xCC9E2D51) & M32, 15) * 0x1B873593 & M32
        h ^= data
    return (_rot(h, 13) * 5 + 0xE6546B64) & M32


def _mhash_finish(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def hash_string(s: str) -> int:
    """lib/hash.c hash_bytes(s, strlen(s), 0), murmur3 variant."""
    b = s.encode()
    h = 0
    for i in range(0, len(b) - len(b) % 4, 4):
        h = _mhash_add(h, int.from_bytes(b[i:i + 4], "little"))
    if len(b) % 4:
        h = _mhash_add(h, int.from_bytes(b[len(b) - len(b) % 4:].ljust(4, b"\0"), "little"))
    return _mhash_finish(h ^ len(b))


def hash_int(x: int, basis: int = 0) -> int:
    """lib/hash.h hash_int = hash_2words(x, basis)."""
    return _mhash_finish(_mhash_add(_mhash_add(x, 0), basis) ^ 8)


def hmap_order(keys: list[tuple[str, int]]) -> tuple[list[str], bool]:
    """Iteration order of an OVS hmap after inserting (key, hash) in this order (buckets
    ascending, newest first in a bucket, resized as lib/hmap.c does), and whether the first
    two keys share a bucket."""
    mask, buckets = 0, [[]]   # type: ignore[var-annotated]
    for n, (key, h) in enumerate(keys, start=1):
        buckets[h & mask].insert(0, (key, h))
        if n // 2 > mask:
            new = n // 2
            for s in (1, 2, 4, 8, 16, 32):
                new |= new >> s
            new |= (new & 1) << 1
            if new > mask:
                old, mask = buckets, new
                buckets = [[] for _ in range(mask + 1)]
                for b in old:
                    for k, hh in b:
                        buckets[hh & mask].insert(0, (k, hh))
    shared = len(keys) >= 2 and any(
        {keys[0][0], keys[1][0]} <= {k for k, _ in b} for b in buckets)
    return [k for b in buckets for k, _ in b], shared


def inner_port_number(bridge: str, tunnel_port: str) -> int | None:
    """Datapath number of the inner bridge port when it was added in one transaction with the
    tunnel port (3 or 4), None when the names share a bucket (order not in the names)."""
    order, shared = hmap_order([(n, hash_string(n)) for n in (bridge, tunnel_port)])
    return None if shared else (3 if order[0] == bridge else 4)


def polled_before(a: int, b: int, n_ports: int = 5) -> bool:
    order, _ = hmap_order([(str(i), hash_int(i)) for i in range(n_ports)])
    return order.index(str(a)) < order.index(str(b))


def rows(results: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((results / "cases").glob("*.json")):
        d = json.loads(f.read_text())
        info = (d.get("tunnel") or {}).get("info") or {}
        m = d.get("metrics") or {}
        if not info.get("phy_bridge") or "tcp_rtt_p50" not in m:
            continue
        recorded = info.get("dp_ports")
        if recorded:   # the case says (port_order recorded since the fix)
            nums = {s: p.get(info["bridge"]) for s, p in recorded.items()}
            inner = nums["a"] if nums["a"] == nums["b"] else None
            how = "recorded"
        else:
            inner, how = inner_port_number(info["bridge"], info["tunnel_port"]), "replayed"
        # the underlay port is 1 or 2; 3 is polled after both, 4 before both
        pred = "undecided" if inner is None else (
            "inner after underlay" if polled_before(2, inner) and polled_before(1, inner)
            else "inner before underlay")
        out.append({"case": f.stem, "label": d["case"]["tunnel"]["label"],
                    "order": info.get("port_order", "hashed"), "inner": inner, "how": how,
                    "pred": pred, "p50": m["tcp_rtt_p50"]["value"],
                    "placement": (d.get("testbed") or {}).get("placement", {}).get("mode")})
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    groups: dict[str, list[float]] = {}
    for d in argv:
        for r in rows(Path(d)):
            print(f"{Path(d).name:10} {r['case'][:44]:44} {r['order']:6} inner={r['inner']} "
                  f"({r['how']}) {r['pred']:22} p50 {r['p50']:6.1f} us  placement "
                  f"{r['placement']}")
            groups.setdefault(f"{r['pred']}, placement {r['placement']}", []).append(r["p50"])
    for k, v in sorted(groups.items()):
        print(f"{k}: {len(v)} cases, p50 {min(v):.0f}-{max(v):.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
