"""IPsec teardown leaves a host's own IPsec alone (guest test: needs kernel ESP).

Before the tunnel comes up, each site gets IPsec of "its own" (made by this test in the
test's namespaces): an ESP SA with reqid 7, a route-based policy pair with if_id 1 (what
tunbench itself used before its ids carried the project prefix) and a policy between other
networks. None of them can match the tunnel's traffic. After the tunnel's own teardown
(its ledger entries, newest first, as the runner undoes a case) every one of them must still
be there, byte for byte as listed, and nothing of tunbench's (reqid or if_id 0x7462nnnn) may
be left. Before the fix, `ip xfrm state flush` / `policy flush` took them all.

Written for the VM lab tier; not run on the development host (no ESP there: see
tests/netns/test_xfrm_teardown.py for the half that runs there).
"""

from __future__ import annotations

import secrets

import pytest
from test_kernel_tunnels import wait_ping

from tunbench import tunnels
from tunbench.testbed import local, names
from tunbench.testbed.base import Site
from tunbench.testbed.ledger import Ledger
from tunbench.tunnels import _xfrm

pytestmark = pytest.mark.correctness

CASES = [
    {"impl": "xfrm", "mode": "tunnel", "cipher": "aes-gcm-128"},
    {"impl": "xfrm", "mode": "transport", "cipher": "aes-gcm-128"},
    {"impl": "kernel", "mode": "tunnel", "encap": False, "cipher": "aes-gcm-128"},
    {"impl": "kernel", "mode": "transport", "encap": True, "cipher": "aes-gcm-128"},
]


def states(site: Site) -> list[str]:
    """One line per SA: addresses, SPI, reqid, mode (keys left out)."""
    out, cur = [], ""
    for line in site.run(["ip", "xfrm", "state", "list"], timeout=10).stdout.splitlines():
        if line.startswith("src "):
            cur = line.strip()
        elif line.strip().startswith("proto "):
            out.append(f"{cur} {line.strip()}")
    return sorted(out)


def policies(site: Site) -> list[str]:
    """One line per policy: selector, direction, if_id (socket policies left out)."""
    out, cur = [], ""
    for line in site.run(["ip", "xfrm", "policy", "list"], timeout=10).stdout.splitlines():
        if line.startswith("src "):
            cur = line.strip()
        elif line.strip().startswith("dir "):     # socket policies say "socket in/out"
            out.append(f"{cur} {line.split()[1]}")
        elif line.strip().startswith("if_id") and out:
            out[-1] += f" if_id {int(line.split()[1], 16)}"
    return sorted(out)


def add_foreign(site: Site) -> None:
    """The host's own IPsec, none of which matches the tunnel's traffic."""
    key = secrets.token_hex(20)
    site.run(["ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto",
              "esp", "spi", "0x00004242", "reqid", "7", "mode", "tunnel", "aead",
              "rfc4106(gcm(aes))", f"0x{key}", "128"], timeout=10)
    tmpl = ["tmpl", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "reqid", "7",
            "mode", "tunnel"]
    for direction in ("out", "in"):
        site.run(["ip", "xfrm", "policy", "add", "src", "0.0.0.0/0", "dst", "0.0.0.0/0",
                  "dir", direction, *tmpl, "if_id", "1"], timeout=10)
    site.run(["ip", "xfrm", "policy", "add", "src", "203.0.113.0/24", "dst", "198.51.100.0/24",
              "dir", "out", *tmpl], timeout=10)


def ours(lines: list[str]) -> list[str]:
    """Lines naming a reqid or if_id of tunbench's (0x7462nnnn; both printed in decimal)."""
    out = []
    for ln in lines:
        words = ln.split()
        if any(w in ("reqid", "if_id") and nxt.isdigit()
               and _xfrm.ID_BASE <= int(nxt) <= _xfrm.ID_BASE + 0xFFFF
               for w, nxt in zip(words, words[1:])):
            out.append(ln)
    return out


@pytest.mark.parametrize("raw", CASES, ids=lambda r: f"{r['impl']}-{r['mode']}")
def test_foreign_ipsec_survives_the_case_teardown(raw: dict[str, object]) -> None:
    rid = names.new_run_id()
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        for site in tb.sites():
            add_foreign(site)
        before = {s.name: (states(s), policies(s)) for s in tb.sites()}
        assert all(len(st) == 1 and len(po) == 3 for st, po in before.values()), before
        n = len(ledger.entries)
        drv = tunnels.get("ipsec")
        params = drv.parse_params(raw)
        assert drv.requirements(params) == [], drv.requirements(params)
        ep = drv().up(tb, params)
        wait_ping(tb, ep.b4)
        for site in tb.sites():       # ours were there, beside the host's own
            have = states(site)
            assert ours(have), have
            assert set(before[site.name][0]) < set(have), have
        case = ledger.entries[n:]
        del ledger.entries[n:]
        for e in reversed(case):      # the case's teardown, as the runner does it
            ledger.undo_entry(e)
        for site in tb.sites():
            after = (states(site), policies(site))
            assert after == before[site.name], (site.name, after)
            assert not ours(after[0]) and not ours(after[1]), after
    finally:
        errors = ledger.close()
        assert not errors, errors
