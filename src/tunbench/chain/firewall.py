"""firewall: nftables in the hop's forward hook, with N rules of a chosen shape.

Shapes (what a packet costs):
- `linear`: N rules that never match forwarded traffic (source addresses from 10.0.0.0/8),
  each one evaluated for every packet: the cost of a long unoptimised rule list.
- `set`: one rule looking the source up in a set of N addresses: one hash lookup whatever N.

`stateful = true` puts the usual `ct state established,related accept` first, so conntrack
tracks every flow (its cost is per packet too; one-way UDP never becomes established, so its
packets still walk the rules). `limit = "100mbit"` polices forwarded traffic above that rate
(nft `limit rate over ... drop`): a firewall that is the bottleneck on purpose; nft's rate
unit is the second, so the policer lets one second's worth through as a burst first. Every
drop is counted in a named counter, read into the per-hop figures.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ..testbed.ledger import Ledger
from .base import (
    FRAG_HIGH_THRESH,
    FRAG_TIMEOUT_S,
    RATE_RE,
    Function,
    Hop,
    Param,
    nft,
    nft_counters,
)

TABLE = "tb_fw"
MAX_RULES = 100_000
# Conntrack reassembles IPv6 in queues of its own (nf_defrag_ipv6: 60 s, 4 MB by default),
# apart from the namespace's ip6frag_* (chain/build.py CHAIN_SYSCTLS covers IPv4, whose
# conntrack defrag uses the namespace's queues): measured through router -> wan -> fw ->
# router with 3000 B IPv6 packets, one overloaded trial, then every 300 pps trial lost all of
# its packets at the firewall for as long as 60 s; with 1 s none. Set once conntrack is in
# use (the ruleset is loaded): before, a host with conntrack as a module may not have them.
CONNTRACK_FRAG_SYSCTLS = (f"net.netfilter.nf_conntrack_frag6_timeout={FRAG_TIMEOUT_S}",
                          f"net.netfilter.nf_conntrack_frag6_high_thresh={FRAG_HIGH_THRESH}")


def limit_bytes_per_s(rate: str) -> int:
    """A tc-style rate (100mbit, 10mbps) as bytes per second, for nft's `limit rate`."""
    from ..rates import rate_mbps
    return int(rate_mbps(rate) * 1e6 / 8)


def deny_addrs(n: int) -> list[str]:
    """N source addresses that no testbed packet carries (10.0.0.0/8)."""
    base = int(ipaddress.ip_address("10.0.0.1"))
    return [str(ipaddress.ip_address(base + i)) for i in range(n)]


def ruleset(params: dict[str, Any]) -> str:
    """The nftables script of one firewall (pure: tested without root)."""
    n, shape = int(params["rules"]), params["shape"]
    lines = [f"table inet {TABLE} {{",
             "  counter denied {}", "  counter policed {}", "  counter passed {}"]
    if shape == "set" and n:
        lines += ["  set deny4 {", "    type ipv4_addr", "    flags constant",
                  "    elements = { " + ", ".join(deny_addrs(n)) + " }", "  }"]
    lines += ["  chain forward {", "    type filter hook forward priority 0; policy accept;"]
    if params["limit"]:   # a policer sees every forwarded packet, established or not
        lines.append(f"    limit rate over {limit_bytes_per_s(params['limit'])} bytes/second "
                     "counter name policed drop")
    if params["stateful"]:
        lines.append("    ct state established,related counter name passed accept")
    if shape == "set" and n:
        lines.append("    ip saddr @deny4 counter name denied drop")
    elif n:
        lines += [f"    ip saddr {a} counter name denied drop" for a in deny_addrs(n)]
    lines += ["    counter name passed accept", "  }", "}"]
    return "\n".join(lines) + "\n"


class Firewall(Function):
    kind = "firewall"
    summary = "nftables forward filter: N rules (linear or one set), stateful or not, optional policing"
    tools = ("nft",)
    params = {
        "rules": Param(int, 100, (0, MAX_RULES), f"a number of rules from 0 to {MAX_RULES}",
                       "1000"),
        "shape": Param(str, "linear", ("linear", "set"), "linear or set", '"set"'),
        "stateful": Param(bool, True, None, "true or false", "false"),
        "limit": Param(str, "", RATE_RE, "a rate like 100mbit (police forwarded traffic)",
                       '"100mbit"'),
    }

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        nft(hop, ruleset(hop.params))   # goes with the namespace
        if hop.params["stateful"]:
            hop.run(["sysctl", "-qw", *CONNTRACK_FRAG_SYSCTLS], timeout=10)

    def counters(self, hop: Hop) -> dict[str, int]:
        return nft_counters(hop, TABLE)


FUNCTION = Firewall
