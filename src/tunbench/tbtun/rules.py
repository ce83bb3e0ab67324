"""`tunbench tunnel-rules add|del|list`: manage the rules of a running tbtun site.

A site is its pin directory (/sys/fs/bpf/tb-<run>/<site>) or the short form <run>/<site>, on
this host or, with `--host USER@HOST`, on a remote host (a campaign's site over SSH: one
connection and an agent without netlink for the command; bpftool runs there). Edits go
straight into the pinned LPM maps: the datapath picks them up with the next packet, nothing
restarts. Every argument is checked before a map is touched.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..capabilities import root_missing
from ..errors import SpecError, TunbenchError
from ..testbed.base import Site
from . import loader, maps


@contextmanager
def on_host(target: str | None, ssh_config: str | None = None) -> Iterator[Site]:
    """Where the pins are: this host, or a remote one reached over SSH for the command."""
    if not target:
        yield loader.here()
        return
    from ..remote.agent.client import Agent
    from ..remote.transport import Connection, SshOptions, check_target
    from ..testbed.remote import RemoteSite
    options = SshOptions(config_file=Path(os.path.expanduser(ssh_config))
                         if ssh_config else None)
    with Connection.open(check_target(target), options=options, name="rules") as conn:
        agent = Agent.start(conn, netlink=False)
        try:
            yield RemoteSite("rules", None, "", "", "", host=target, agent=agent)
        finally:
            agent.close()


def site_path(text: str, on: Site | None = None) -> Path:
    """--site: a pin directory, or <run>/<site> under /sys/fs/bpf/tb-<run>/<site>."""
    p = Path(text)
    if not p.is_absolute():
        run, _, site = text.partition("/")
        if not run or not site:
            raise SpecError(f"--site {text!r} is neither a pin directory nor <run>/<site>",
                            "e.g. --site 3fa1c/a or --site /sys/fs/bpf/tb-3fa1c/a")
        p = loader.site_dir(run, site)
    return loader.check_site(p, on)


def add_parser(sub: Any) -> None:
    t = sub.add_parser("tunnel-rules", help="add, delete or list the rules of a running "
                       "tbtun site (ebpf-vxlan / ebpf-geneve)")
    tsub = t.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = tsub.add_parser("add", help="add or replace the rule for an inner prefix")
    a.add_argument("--site", required=True, help="pin directory or <run>/<site>")
    a.add_argument("prefix", help="inner destination prefix, e.g. 198.19.7.0/24")
    a.add_argument("--remote", required=True, help="remote site's underlay IPv4 address")
    a.add_argument("--vni", type=int, default=42, help="VNI (default 42)")
    a.add_argument("--encap", choices=sorted(maps.ENCAPS), default="vxlan")
    a.add_argument("--port", type=int, default=0, help="outer UDP port (default: IANA port)")
    a.add_argument("--inner-mac", default=maps.DEFAULT_INNER_MAC,
                   help="inner Ethernet destination (the far device's MAC for a kernel peer)")
    d = tsub.add_parser("del", help="delete the rules of inner prefixes")
    d.add_argument("--site", required=True, help="pin directory or <run>/<site>")
    d.add_argument("prefix", nargs="+", help="inner prefix(es) of rules to delete")
    ls = tsub.add_parser("list", help="rules with per-rule packet/byte counters, and the "
                         "datapath's drop counters (every site when --site is left out)")
    ls.add_argument("--site", help="pin directory or <run>/<site>")
    ls.add_argument("--json", action="store_true", help="one JSON object")
    for sp in (a, d, ls):
        sp.add_argument("--host", metavar="USER@HOST", help="the site's host, over SSH "
                        "(default: this host)")
        sp.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                        help="ssh config file for --host (ssh -F; default ~/.ssh/config)")
    t.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    m = root_missing()
    if m:
        raise TunbenchError(m.why, m.fix)
    if args.action == "add":     # bad input: one line before any connection
        rule = maps.Rule(args.prefix, args.remote, args.vni, args.encap, args.port,
                         args.inner_mac.lower())
        problems = rule.problems()
        if problems:
            raise SpecError(f"rule {rule.prefix}: {'; '.join(problems)}",
                            "see `tunbench tunnel-rules add --help`")
    with on_host(args.host, args.ssh_config) as on:
        if args.action == "list":
            return _list(args, on)
        where = site_path(args.site, on)
        if args.action == "add":
            (done,) = loader.add_rules(where, [rule], on)
            print(f"rule {done.prefix} -> {done.remote} {done.encap} vni {done.vni} "
                  f"port {done.dport} (slot {done.id})")
        else:
            for prefix in loader.del_rules(where, args.prefix, on):
                print(f"deleted rule {prefix}")
    return 0


def describe(where: Path, on: Site | None = None) -> dict[str, Any]:
    counters = loader.rule_counters(where, on)
    return {"site": str(where), "attach": loader.attached_by(where, on),
            "rules": [{**r.to_dict(), "packets": counters.get(r.id, (0, 0))[0],
                       "bytes": counters.get(r.id, (0, 0))[1]}
                      for r in loader.list_rules(where, on)],
            "stats": loader.stats(where, on)}


def _list(args: argparse.Namespace, on: Site) -> int:
    wheres = [site_path(args.site, on)] if args.site else loader.sites(on)
    docs = [describe(w, on) for w in wheres]
    if args.json:
        print(json.dumps({"sites": docs}, indent=1))
        return 0
    if not docs:
        print(f"no running tbtun site on {args.host or 'this host'}")
    for doc in docs:
        print(f"{doc['site']} (attached by {doc['attach']})")
        for r in doc["rules"]:
            print(f"  {r['prefix']:<20} -> {r['remote']:<15} {r['encap']:<6} vni {r['vni']:<8} "
                  f"port {r['port']:<5} {r['packets']:>10} pkts {r['bytes']:>12} B")
        st = doc["stats"]
        print("  " + ", ".join(f"{k} {v['packets']}" for k, v in st.items()))
    return 0
