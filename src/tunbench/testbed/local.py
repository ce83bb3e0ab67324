"""The default testbed: two network namespaces on this host joined by a veth underlay.

Addresses come from the benchmarking ranges (RFC 2544: 198.18.0.0/15; RFC 5180: 2001:2::/48),
so they never collide with a real network. Nothing is created in the root namespace: the veth
pair is created with one end directly inside each site's namespace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import proc
from . import names, netlink
from .base import Site, Testbed
from .ledger import STATE_DIR, Ledger, kill_netns_processes, owner_alive
from .netem import Netem, qdisc_argvs

UNDERLAY4 = ("198.18.0.1", "198.18.0.2")
UNDERLAY6 = ("2001:2::1", "2001:2::2")

SITE_SYSCTLS = (
    "net.ipv6.conf.all.accept_dad=0",
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv4.ip_forward=1",
    "net.ipv6.conf.all.forwarding=1",
)


@contextmanager
def scratch(mtu: int = 1500) -> Iterator[Testbed]:
    """A two-site testbed under a fresh run id, for a bench, a capture script or a test:
    built, yielded, and torn down on success and on failure (its ledger, then a sweep of its
    run id). A ledger that failed to undo something, or left a namespace of the run for the
    sweep, raises after the sweep, naming the run id."""
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        yield build(rid, ledger, mtu=mtu)
    finally:
        errors = [str(e) for e in ledger.close()]
        left = [n for n in netlink.list_netns() if n.startswith(f"{names.PREFIX}-{rid}-")]
        sweep(rid)
        if left:
            errors.append(f"namespaces left behind by the ledger: {left}")
        if errors:
            raise RuntimeError(f"teardown of testbed {rid}: {'; '.join(errors)}")


def tbf_args(rate: str) -> list[str]:
    """tbf shaping of an underlay end; burst sized for 64 KB GSO frames."""
    return ["tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]


def tbf_argv(ifname: str, rate: str) -> list[str]:
    return ["tc", "qdisc", "replace", "dev", ifname, "root", *tbf_args(rate)]


def build(run_id: str, ledger: Ledger, *, mtu: int = 1500, rate: str | None = None,
          workdir: Path | None = None, netem: Netem | None = None) -> Testbed:
    """Create the two sites and their underlay. Every object enters the ledger as it is made."""
    sites = []
    for i, side in enumerate(("a", "b")):
        ns = names.netns_name(run_id, side)
        netlink.create_netns(ns)
        ledger.netns(ns)
        sites.append(Site(side, ns, names.link_name(run_id, "u" + side),
                          UNDERLAY4[i], UNDERLAY6[i]))
    a, b = sites
    # The veth pair lives inside the namespaces; it disappears with them.
    netlink.add_veth(a.underlay_if, str(a.netns), b.underlay_if, str(b.netns))
    for site in (a, b):
        ns = str(site.netns)
        for setting in SITE_SYSCTLS:
            proc.run(["sysctl", "-qw", setting], netns=ns, timeout=10)
        netlink.set_link(ns, "lo", state="up")
        netlink.set_link(ns, site.underlay_if, mtu=mtu)
        netlink.add_addr(ns, site.underlay_if, f"{site.underlay4}/24")
        netlink.add_addr(ns, site.underlay_if, f"{site.underlay6}/64")
        netlink.set_link(ns, site.underlay_if, state="up")
        for argv in qdisc_argvs(site.underlay_if, netem, rate, tbf_args(rate) if rate else []):
            proc.run(argv, netns=ns, timeout=10)
        if netem is not None and netem.active:
            ledger.command(["tc", "qdisc", "del", "dev", site.underlay_if, "root"], ns)
    workdir = make_workdir(run_id, ledger, workdir)
    tb = Testbed("local-netns", run_id, a, b, mtu, ledger, workdir, rate=rate)
    if netem is not None and netem.active:
        tb.notes["netem"] = netem.describe()
    return tb


def sweep(run_id: str | None = None) -> list[str]:
    """Remove namespaces (and the processes inside them), root-namespace links and tbtun pin
    directories of this project left by crashed runs; only those of `run_id` when given."""
    removed = []
    for ns in netlink.list_netns():
        if not names.is_ours_netns(ns):
            continue
        rid = ns.split("-")[1]
        if run_id is None and owner_alive(rid):
            continue  # another tunbench run in progress
        if run_id is None or rid == run_id:
            kill_netns_processes(ns)
            netlink.remove_netns(ns)
            removed.append(f"netns {ns}")
    for link in netlink.link_names(None):
        rid = link[len(names.PREFIX):len(names.PREFIX) + names.RUN_ID_LEN]
        if not names.is_ours_link(link) or (run_id is None and owner_alive(rid)):
            continue
        if run_id is None or rid == run_id:
            netlink.delete_link(link, None)
            removed.append(f"link {link}")
    from ..tbtun import loader  # tbtun pins of crashed runs (/sys/fs/bpf/tb-<run>)
    removed += loader.sweep(run_id)
    from . import sitecores  # site cpuset cgroups of crashed runs (tb-<run>-<site>)
    removed += sitecores.sweep(run_id)
    if run_id is None:          # ssh control files carry a PID, not a run id
        from ..remote import transport
        removed += transport.sweep_control_dir()
    return removed


def add_routed_hop(tb: Testbed) -> str:
    """A third namespace c behind site b, which forwards: a -> b -> c is one router hop (for
    hop-count and routed-path checks). Registered in the testbed's ledger; returns c's
    address."""
    ns_c = names.netns_name(tb.run_id, "c")
    netlink.create_netns(ns_c)
    tb.ledger.netns(ns_c)
    bc, cb = names.link_name(tb.run_id, "bc"), names.link_name(tb.run_id, "cb")
    netlink.add_veth(bc, str(tb.b.netns), cb, ns_c)
    tb.ledger.link(bc, str(tb.b.netns))
    netlink.add_addr(str(tb.b.netns), bc, "198.18.1.1/24")
    netlink.add_addr(ns_c, cb, "198.18.1.2/24")
    for ns, ifn in ((str(tb.b.netns), bc), (ns_c, cb), (ns_c, "lo")):
        netlink.set_link(ns, ifn, state="up")
    netlink.add_route(str(tb.a.netns), "198.18.1.0/24", gateway=tb.b.underlay4)
    netlink.add_route(ns_c, "0.0.0.0/0", gateway="198.18.1.1")
    return "198.18.1.2"


def workdir_log_tails(workdir: Path | None, lines: int = 20) -> list[str]:
    """The last lines of every process log in a case directory here, one block each."""
    parts = []
    if workdir is not None and workdir.is_dir():
        for log in sorted(workdir.glob("*.log*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                parts.append(f"--- {log.name}\n" + "\n".join(text))
    return parts


def make_workdir(run_id: str, ledger: Ledger, workdir: Path | None = None) -> Path:
    """The run's private state directory (0700, /run/tunbench/<run id> by default), in the
    ledger so teardown removes it."""
    if workdir is None:
        workdir = STATE_DIR / run_id
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(workdir, 0o700)
    ledger.path(workdir)
    return workdir
