"""Kernel ESP and kernel WireGuard as the encryption gateways of a chain, proven inside the VM
lab guest (this host's kernel has neither, so tests/netns/test_chain_gateways.py runs the same
chain with strongSwan's libipsec and wireguard-go).

The chain router -> gateway -> WAN (tbf) -> gateway -> router, built by the product's chain
builder with `impl = "kernel"` on the gateway pair:
- the pair records the kernel implementation (label, impl, encrypts) and the inner path MTU the
  kernel tunnel leaves;
- a ping from site a to site b crosses 4 routed hops (TTL 60) and, on the WAN, only the
  gateways' encrypted packets are seen (ESP, or ESP in UDP/4500; WireGuard UDP/51820), never
  a site address in the clear;
- a 1 s iperf3 between the sites moves at least its bytes through the WAN's interface;
- the keys / PSKs are 0600 in the gateways' directory and gone after teardown, and nothing of
  the chain is left (namespaces, links).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from tunbench import pcap, tunnels
from tunbench.chain import build as chain_build
from tunbench.chain import hops
from tunbench.chain import spec as chain_spec
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Site
from tunbench.testbed.ledger import Ledger
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = pytest.mark.correctness

ESP = 50
ROUTED = 4        # router 1, gwa, gwb, router 5 (the WAN forwards the gateways' packets only)


def _chain(tunnel: str) -> dict[str, Any]:
    return {"path": ["router", "gwa", "wan", "gwb", "router"],
            "gwa": {"kind": "gateway", "tunnel": tunnel, "impl": "kernel"},
            "gwb": {"kind": "gateway", "tunnel": tunnel, "impl": "kernel"},
            "wan": {"kind": "wan", "rate": "200mbit"}}


CASES = [
    ("ipsec", lambda p: p.proto == ESP or p.udp_to(4500), "psk*"),
    ("wireguard", lambda p: p.udp_to(51820), "*.key"),
]


@pytest.mark.parametrize(("tunnel", "outer", "secret_glob"), CASES, ids=[c[0] for c in CASES])
def test_kernel_gateway_pair_encrypts_across_the_wan(tunnel: str, outer: Any,
                                                     secret_glob: str) -> None:
    rid = names.new_run_id()
    ledger = Ledger(rid)
    secrets: list[Path] = []
    try:
        tb = chain_build.build(rid, ledger, chain_spec.parse(_chain(tunnel)))  # type: ignore[arg-type]
        gw = tb.notes["chain"]["gateway_tunnel"]
        assert gw["impl"] == "kernel" and "kernel" in gw["label"] and gw["encrypts"], gw
        assert tb.underlay_mtu == gw["inner_mtu"] < 1500, (tb.underlay_mtu, gw)
        by = {h.name: h for h in hops.hops_of(tb)}
        gwa, gwb, wan = by["gwa"], by["gwb"], by["wan"]
        on_wan = Site("wan", wan.netns, wan.left_if, wan.left4, "")
        wan_before = netlink.link_stats(wan.netns, wan.left_if)
        with pcap.capture(tb, on_wan, wan.left_if, "wan") as cap:
            r = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", tb.b.underlay4], check=False,
                         timeout=60)
            assert r.ok and f"ttl={64 - ROUTED}" in r.stdout, r.stdout
            ep = tunnels.get("native")().up(tb, tunnels.get("native").default_params())
            out = Stream().run(Context(tb, ep, duration=1, warmup=0, family=4), StreamParams())
        got = out.raw["iperf3"]["bytes_received"]
        assert got > 100_000, out.raw["iperf3"]
        wan_after = netlink.link_stats(wan.netns, wan.left_if)
        moved = (wan_after["rx_bytes"] - wan_before["rx_bytes"]) + \
            (wan_after["tx_bytes"] - wan_before["tx_bytes"])
        assert moved >= got, (moved, got)
        ends = {(gwa.right4, gwb.left4), (gwb.left4, gwa.right4)}
        v4 = [p for p in cap.packets if p.version == 4]
        assert v4 and all(outer(p) and (p.src, p.dst) in ends for p in v4), v4[:5]
        sites = {tb.a.underlay4, tb.b.underlay4}
        assert not [p for p in cap.packets if sites & {p.src, p.dst}], "site traffic in clear"
        secrets = sorted((Path(tb.workdir) / "gateways").glob(secret_glob))
        assert secrets and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secrets)
    finally:
        errors = ledger.close()
        left_ns = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        local.sweep(rid)
        assert not errors, errors
        assert not left_ns, left_ns
    assert not [p for p in secrets if p.exists()], secrets
