"""IPsec teardown removes only tunbench's own xfrm objects, never a host's own IPsec.

This kernel has XFRM_USER but no ESP/AH/IPcomp (`ip xfrm state add` fails: "Requested type not
found"), so only xfrm *policies* can exist here: this test proves the policy half and that
the SA deletions are harmless when nothing matches. The whole ipsec case (foreign SAs and
policies surviving a kernel ESP case's teardown) runs in the VM lab guest:
tests/vmlab/test_ipsec_teardown.py.
"""

from __future__ import annotations

import pytest

from tunbench.errors import UnavailableError
from tunbench.testbed.base import Site, Testbed
from tunbench.tunnels import _xfrm

pytestmark = [pytest.mark.netns, pytest.mark.correctness,
              pytest.mark.beside]


def policies(site: Site) -> list[str]:
    """One line per policy: selector, direction and if_id (what identifies it)."""
    text = site.run(["ip", "xfrm", "policy", "list"], timeout=10).stdout
    out, cur = [], ""
    for line in text.splitlines():
        if line.startswith("src "):
            cur = line.strip()
        elif line.strip().startswith("dir "):
            out.append(f"{cur} {line.split()[1]}")
        elif line.strip().startswith("if_id") and out:
            out[-1] += f" if_id {int(line.split()[1], 16)}"
    return sorted(out)


def add_policy(site: Site, src: str, dst: str, direction: str, reqid: int, if_id: int = 0
               ) -> None:
    argv = ["ip", "xfrm", "policy", "add", "src", src, "dst", dst, "dir", direction, "tmpl",
            "src", site.underlay4, "dst", "192.0.2.99", "proto", "esp", "reqid", str(reqid),
            "mode", "tunnel"]
    site.run(argv + (["if_id", str(if_id)] if if_id else []), timeout=10)


def test_only_our_policies_and_sas_are_removed(testbed: Testbed) -> None:
    tb = testbed
    site = tb.a
    # the host's own IPsec (created by this test in its own namespace): a route-based tunnel
    # with if_id 1 (what tunbench itself used before its ids carried the prefix), a policy
    # with the same selector and no if_id, and one between other networks
    foreign = [("0.0.0.0/0", "0.0.0.0/0", "out", 7, 1), ("0.0.0.0/0", "0.0.0.0/0", "in", 7, 1),
               ("0.0.0.0/0", "0.0.0.0/0", "out", 7, 0),
               ("203.0.113.0/24", "198.51.100.0/24", "out", 8, 0)]
    for src, dst, d, reqid, if_id in foreign:
        add_policy(site, src, dst, d, reqid, if_id)
    theirs = policies(site)
    assert len(theirs) == 4, theirs

    # ours: what a static tunnel and a charon tunnel register, then add
    ab = _xfrm.new_sa(site.underlay4, tb.b.underlay4, "aes-gcm-128", _xfrm.static_reqids(0)[0])
    static = _xfrm.static_policies(ab, "tunnel", _xfrm.tb_id(1))
    charon = _xfrm.charon_policies("tunnel", site.underlay4, tb.b.underlay4, _xfrm.tb_id(2))
    n = len(tb.ledger.entries)
    _xfrm.register_undo(tb, site, sas=[ab], policies=static)
    _xfrm.register_undo(tb, site, reqids=[_xfrm.tb_id(2)], policies=charon)
    for p in static + charon[:-2]:     # one fwd pair never added: "already gone" is no error
        add_policy(site, p.src, p.dst, p.dir, _xfrm.tb_id(2), p.if_id)
    assert len(policies(site)) == 4 + len(static) + len(charon) - 2

    # the case's teardown: our entries, newest first, as the ledger does
    ours = tb.ledger.entries[n:]
    del tb.ledger.entries[n:]
    for e in reversed(ours):
        tb.ledger.undo_entry(e)
    assert policies(site) == theirs
    assert not [e for e in ours if "flush" in e["argv"]]

    # undoing again (a crashed run's journal replayed) is harmless
    for e in reversed(ours):
        tb.ledger.undo_entry(e)
    assert policies(site) == theirs
    site.run(["ip", "xfrm", "policy", "flush"], timeout=10)   # the test's own, in its netns


def test_transport_mode_refuses_a_host_policy_on_the_underlay_addresses(testbed: Testbed
                                                                        ) -> None:
    """Transport-mode policies carry no if_id of ours: a host that already protects traffic
    between the two underlay addresses is refused before anything is added."""
    tb = testbed
    a, b = tb.a.underlay4, tb.b.underlay4
    _xfrm.check_transport_free(tb.a, a, b)          # nothing there: no error
    add_policy(tb.b, f"{b}/32", f"{a}/32", "out", 9)
    before = policies(tb.b)
    with pytest.raises(UnavailableError) as err:
        _xfrm.check_transport_free(tb.b, b, a)
    msg = str(err.value)
    assert f"site b ({tb.b.netns}) already has an IPsec policy {b}/32 -> {a}/32 dir out" in msg
    assert "\n" not in msg and "mode=tunnel" in err.value.hint
    assert policies(tb.b) == before                # nothing changed
    tb.b.run(["ip", "xfrm", "policy", "flush"], timeout=10)   # the test's own, in its netns
