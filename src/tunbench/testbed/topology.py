"""The sites of a campaign on real hosts: what the user names (`[sites]`, `--site`), one
connection and agent per remote site for the whole campaign, every check before anything is
changed on any host, and the per-case testbed of `RemoteSite`s (testbed/remote.py).

See docs/remote.md ("How a campaign runs on hosts", "Cleanup across hosts").
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import SpecError, TunbenchError, UnavailableError
from ..remote.agent.client import Agent
from ..remote.sshfail import ConnectError
from ..remote.transport import Connection, SshOptions, check_target
from .base import Site
from .ledger import Ledger
from .remote import LIVE_AGENTS, LOCAL, REMOTE_ROOT, AgentLinks, RemoteSite

log = logging.getLogger(__name__)

# ~1 s on this host; 20-90 s on an emulated VM lab guest (TCG) of a loaded 2-core host
NETLINK_IMPORT_WAIT = 300.0


# ---- what the user names ----------------------------------------------------------------
@dataclass(frozen=True)
class SiteSpec:
    """One site of a topology: where it is and (optionally) its underlay."""

    name: str                  # "a" or "b"
    target: str                # "local" or [USER@]HOST (an ssh config alias works)
    underlay_if: str = ""      # detected from the route to the other site when empty
    underlay4: str = ""
    underlay6: str = ""
    cpus: str = ""             # the CPUs of this site's processes and receive work (placement)

    @property
    def local(self) -> bool:
        return self.target == LOCAL

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "underlay_if": self.underlay_if,
                "underlay4": self.underlay4, "underlay6": self.underlay6,
                **({"cpus": self.cpus} if self.cpus else {})}


SITE_KEYS = ("target", "underlay_if", "underlay4", "underlay6", "cpus")


def parse_site(name: str, val: Any, where: str, problems: list[str]) -> SiteSpec | None:
    """One entry of `[sites]`: a target string or a table of SITE_KEYS (None: refused, the
    reason appended to `problems`)."""
    if isinstance(val, str):
        val = {"target": val}
    if not isinstance(val, dict):
        problems.append(f"{where}: sites.{name} must be a target string or a table")
        return None
    bad = sorted(set(val) - set(SITE_KEYS))
    if bad:
        problems.append(f"{where}: unknown field sites.{name}.{bad[0]} (known: "
                        f"{', '.join(SITE_KEYS)})")
        return None
    target = str(val.get("target", ""))
    if target != LOCAL:
        try:
            check_target(target)
        except SpecError as exc:
            problems.append(f"{where}: sites.{name}: {exc.message}")
            return None
    for key in ("underlay4", "underlay6"):
        if val.get(key):
            try:
                ipaddress.ip_address(str(val[key]))
            except ValueError:
                problems.append(f"{where}: sites.{name}.{key} {val[key]!r} is not an "
                                "IP address")
    cpus = val.get("cpus", "")
    if cpus != "":
        from .placement import format_cpus, parse_cpus
        try:
            cpus = format_cpus(parse_cpus(cpus))
        except ValueError as exc:
            problems.append(f"{where}: sites.{name}.cpus {exc}")
            cpus = ""
    return SiteSpec(name, target, str(val.get("underlay_if", "")),
                    str(val.get("underlay4", "")), str(val.get("underlay6", "")), str(cpus))


def parse_host_sites(raw: Any, where: str, problems: list[str], *, testbed: str,
                     example: str, named: Callable[[str], bool], naming: str,
                     order: Callable[[str], Any] = str, cpus: bool = True,
                     local: bool = False) -> dict[str, SiteSpec] | None:
    """`[sites]` of a testbed whose every site is a host of its own (a hub's, a mesh's):
    each entry as parse_site, none 'local' (`local`: at most one, this host's own network
    stack), IPv4 underlay only (`cpus`: a site may have cpus). {} when none is given; None
    when refused (the problem named). `testbed`: how the refusals name it ('hub testbed',
    'mesh'); `example`: a table like the one expected; `named`: whether a site name is one
    of this testbed's, `naming` how they are named."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: [sites] must be a table like {example}")
        return None
    count = len(problems)
    odd = sorted(str(n) for n in raw if not named(str(n)))
    if odd:
        problems.append(f"{where}: site(s) {', '.join(odd)} are not {testbed} sites "
                        f"({naming})")
        return None
    out: dict[str, SiteSpec] = {}
    here: list[str] = []     # the 'local' sites given (`local`: one is kept)
    for name in sorted(raw, key=order):
        site = parse_site(name, raw[name], where, problems)
        if site is None:
            continue
        if site.local and local and here:   # a third one adds no second line
            if len(here) == 1:
                problems.append(f"{where}: sites.{here[0]} and sites.{name} are both "
                                "'local': this host's network stack is one site (a tunnel "
                                f"needs two network stacks); give sites.{name} a host "
                                "of its own")
            here.append(name)
        elif site.local and not local:
            problems.append(f"{where}: sites.{name} is 'local': a {testbed} on hosts puts "
                            "every site on a host of its own (leave [sites] / --site out for "
                            f"the {testbed.split()[0]} on this host's namespaces)")
        elif site.underlay6:
            problems.append(f"{where}: sites.{name}.underlay6: the {testbed} runs over an "
                            "IPv4 underlay only (leave underlay6 out)")
        elif site.cpus and not cpus:
            problems.append(f"{where}: sites.{name}.cpus: the {testbed} on hosts does not "
                            "place a site's processes on CPUs yet (leave cpus out)")
        else:
            out[name] = site
            if site.local:
                here.append(name)
    return out if len(problems) == count else None


def parse_sites(raw: Any, where: str, problems: list[str]) -> dict[str, SiteSpec]:
    """`[sites]` of an experiment file ({a = {target = ...}, b = ...}, or a = "user@host"),
    or what `--site a=...` gave. Both sites or none."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: [sites] must be a table with a and b")
        return {}
    out: dict[str, SiteSpec] = {}
    for name in sorted(set(raw) - {"a", "b"}):
        problems.append(f"{where}: unknown site {name!r} (the sites are a and b)")
    for name in ("a", "b"):
        val = raw.get(name)
        if val is None:
            problems.append(f"{where}: site {name} is missing (give both: --site a=USER@HOST "
                            f"--site b=USER@HOST, or 'local' for this host)")
            continue
        site = parse_site(name, val, where, problems)
        if site is not None:
            out[name] = site
    if len(out) == 2 and out["a"].local and out["b"].local:
        problems.append(f"{where}: both sites are 'local': leave --site out for the local "
                        "two-namespace testbed")
    return out if len(out) == 2 else {}


# ---- connections for a campaign -------------------------------------------------------------
@dataclass
class Endpoint:
    """One remote site's connection and agent, kept for the whole campaign."""

    spec: SiteSpec
    options: SshOptions
    conn: Connection | None = None
    agent: Agent | None = None
    mgmt: dict[str, str] = field(default_factory=dict)

    def connect(self) -> None:
        """Connect, start the agent (with netlink), sweep what crashed agents left there."""
        self.conn = Connection.open(self.spec.target, options=self.options, name=self.spec.name)
        try:
            self.agent = Agent.start(self.conn, netlink=True)
            LIVE_AGENTS[self.agent.agent_id] = self.agent
            for line in self.agent.sweep():
                log.info("%s: swept %s", self.spec.target, line)
            # pyroute2's first import from the zip (compiled on the site, no .pyc) is paid
            # here, with a wait that fits slow sites, not in a case's 30 s netlink calls
            self.agent.call("links", wait=NETLINK_IMPORT_WAIT)
            self.mgmt = self.conn.management_path()
        except BaseException:
            self.close()
            raise
        if int(self.agent.hello.get("euid", -1)) != 0:
            self.close()
            raise TunbenchError(f"{self.spec.target}: tunbench needs root there (it logs in "
                                "as a user without it)", "use root@HOST, or a user with uid 0")

    @property
    def alive(self) -> bool:
        return bool(self.conn and self.conn.alive() and self.agent and self.agent.alive)

    def reconnect(self) -> None:
        self.close()
        self.connect()

    def close(self) -> None:
        if self.agent is not None:
            LIVE_AGENTS.pop(self.agent.agent_id, None)
            try:
                self.agent.close()
            except Exception as exc:   # a dead connection: the host cleans up itself
                log.debug("agent close on %s: %s", self.spec.target, exc)
            self.agent = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class AgentView:
    """A remote site as capability checks see it (capabilities.HostView): its kernel
    configuration and PATH, read through its agent, each asked once."""

    def __init__(self, where: str, agent: Agent) -> None:
        self.where = where
        self.agent = agent
        self.release = str(agent.hello.get("kernel", "?"))
        self._conf: tuple[dict[str, str] | None] | None = None
        self._tools: dict[str, bool] = {}

    def kernel_config(self) -> dict[str, str] | None:
        if self._conf is None:
            self._conf = (self.agent.kernel_config(),)
        return self._conf[0]

    def has_tool(self, tool: str) -> bool:
        if tool not in self._tools:
            out = self.agent.run(["sh", "-c", proc.WHICH_SH, "tb-which", tool],
                                 timeout=20).stdout.strip()
            self._tools[tool] = out not in ("", "-")
        return self._tools[tool]


def route_to(run: Any, addr: str) -> tuple[str, str]:
    """(device, source address) a host uses to reach `addr` (`ip -j route get`)."""
    r = run(["ip", "-j", "route", "get", addr], check=False, timeout=15)
    if not r.ok or not r.stdout.strip():
        return "", ""
    route = json.loads(r.stdout)[0]
    return str(route.get("dev", "")), str(route.get("prefsrc", ""))


# Inner (overlay) ranges every tunnel kind assigns (tunnels/base.py, _spread.py): a site
# reached through one of them would lose its SSH route once the tunnel is up.
# a host that dropped is tried this often, this many seconds apart, before the campaign stops
RECONNECT_TRIES = 3
RECONNECT_PAUSE = 5.0


def lacks_tools(name: str, target: str, missing: list[str], os_release: str) -> str:
    """One problem line: the tools site `name` lacks and the command that installs them there
    (from its /etc/os-release)."""
    pkgs = " ".join(dict.fromkeys(proc.package_for(t) for t in missing))
    return (f"site {name} ({target}) lacks {', '.join(missing)} "
            f"({install_command(os_release)} {pkgs} there)")

def site_log_tails(sites: Iterable[Site], lines: int = 20) -> list[str]:
    """The last lines of every process log in each remote site's case directory, read through
    its agent (sites here, or whose agent is gone, give none)."""
    parts = []
    for site in sites:
        if not isinstance(site, RemoteSite) or site.agent is None or not site.agent.alive:
            continue
        try:
            for n in site.agent.call("list_dir", path=site.workdir)["names"]:
                if ".log" in n:
                    text = site.agent.read_file(f"{site.workdir}/{n}").decode(
                        errors="replace").splitlines()[-lines:]
                    if text:
                        parts.append(f"--- {site.name}:{n}\n" + "\n".join(text))
        except TunbenchError:
            continue
    return parts

def heal_endpoints(endpoints: dict[str, Any]) -> list[str]:
    """Reconnect every endpoint (name -> SiteEndpoint) whose connection dropped, a few tries
    apart; the names healed. An endpoint that stays unreachable raises its connect error."""
    healed = []
    for name, ep in endpoints.items():
        if ep.alive:
            continue
        for attempt in range(RECONNECT_TRIES):
            try:
                ep.reconnect()
                break
            except ConnectError:
                if attempt == RECONNECT_TRIES - 1:
                    raise
                time.sleep(RECONNECT_PAUSE)
        healed.append(name)
    return healed
INNER_NETS = (ipaddress.ip_network("198.19.0.0/16"), ipaddress.ip_network("2001:2::/48"))
BASE_TOOLS = ("ip", "ping", "ethtool")
# Constant script: which of the tools named as its arguments are missing on the host.
INSTALL = {"debian": "apt-get install", "ubuntu": "apt-get install", "fedora": "dnf install",
           "rhel": "dnf install", "centos": "dnf install", "rocky": "dnf install",
           "almalinux": "dnf install", "alpine": "apk add", "arch": "pacman -S",
           "opensuse-leap": "zypper install", "sles": "zypper install"}


@dataclass
class Resolved:
    """A site's underlay as used for the campaign: given, or detected from the route."""

    dev: str
    addr4: str
    addr6: str
    mgmt_dev: str          # the interface carrying the SSH session (or, on this host, the
                           # one towards the remote site): never changed


def install_command(os_release: str) -> str:
    """The package install command of a host's distribution (/etc/os-release text)."""
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _, val = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids += val.strip().strip('"').split()
    return next((INSTALL[i] for i in ids if i in INSTALL), "apt-get install")


def sees_state(owner: Agent, other: Agent) -> bool:
    """Does the host of agent `other` see the state directory of agent `owner`?"""
    state = str(owner.hello.get("state", ""))
    return bool(state) and other.run(["test", "-d", state], check=False, timeout=10).ok


def machine_groups(ids: dict[str, dict[str, Any]], target: Callable[[str], str],
                   sees: Callable[[str, str], bool]) -> list[dict[str, Any]]:
    """The sites (name -> agent hello: boot_id, machine_id, netns) that run on one machine,
    one group per machine shared by two or more: {"sites", "boot_id", "machine_id",
    "filesystem"}. The same kernel boot id means one kernel, so one set of CPUs; the machine id
    and whether the first site's agent directory is seen from every other one (one
    filesystem) say how much else they share. Two sites in one network namespace are refused
    (one line, before any change): a tunnel or a hub needs a network stack per site."""
    by_boot: dict[str, list[str]] = {}
    for name, ident in ids.items():
        if ident.get("boot_id"):
            by_boot.setdefault(str(ident["boot_id"]), []).append(name)
    out = []
    for members in by_boot.values():
        if len(members) < 2:
            continue
        seen_ns: dict[str, str] = {}
        for name in members:
            ns = str(ids[name].get("netns") or "")
            if ns and ns in seen_ns:
                first = seen_ns[ns]
                raise SpecError(f"sites {first} ({target(first)}) and {name} ({target(name)}) "
                                "are one machine and one network namespace: a tunnel needs "
                                "two network stacks", "use two hosts, or two containers or "
                                "namespaces of one host, each with its own sshd")
            seen_ns.setdefault(ns, name)
        mids = {ids[n].get("machine_id") for n in members}
        out.append({"sites": members, "boot_id": True,
                    "machine_id": len(mids) == 1 and bool(next(iter(mids))),
                    "filesystem": all(sees(members[0], n) for n in members[1:])})
    return out


class Topology:
    """The two sites of a campaign on real hosts (or one on this host): one connection and
    agent per remote site for the whole campaign; a fresh case directory per case."""

    def __init__(self, specs: dict[str, SiteSpec], options: SshOptions | None = None) -> None:
        self.specs = specs
        self.options = options or SshOptions()
        self.endpoints = {n: Endpoint(s, self.options) for n, s in specs.items() if not s.local}
        self.resolved: dict[str, Resolved] = {}
        self._views: dict[str, AgentView] = {}
        self.impls: dict[str, Any] = {}    # tunnel label -> implchoice.Choice (impl=auto)
        self.shared: dict[str, Any] | None = None   # the sites share one machine: how we know

    # -- opening: every check before anything is changed on any host ---------------------
    def open(self, *, mtus: tuple[int, ...] = (), tools: dict[str, list[str]] | None = None,
             kernel: dict[str, list[str]] | None = None, shaping: bool = False,
             takes_underlay: str = "", needs_ipv6: str = "",
             plan: Callable[[Topology], tuple[dict[str, list[str]], dict[str, list[str]]]]
             | None = None, offloads: str = "") -> None:
        """Connect and check everything; `tools` and `kernel` (option -> what needs it) must
        be on every site; `takes_underlay` names a tunnel that moves the underlay's addresses
        (OVS userspace datapath); `needs_ipv6` names tunnels that run over an IPv6 underlay
        (srv6, underlay=6): every site must then have its underlay6 given; `plan`, called
        once connected, decides from the sites themselves (impl=auto, see implchoice) and
        returns the tools and kernel options, replacing `tools` and `kernel`; `offloads`
        names offload variants that change features with ethtool -K."""
        self._check_ipv6(needs_ipv6)
        try:
            for ep in self.endpoints.values():
                ep.connect()
            self.shared = self._shared_machine()
            self._resolve()
            self._check_management(mtus, shaping, takes_underlay, offloads)
            if plan is not None:
                tools, kernel = plan(self)
            self._check_tools(tools or {}, kernel or {})
        except BaseException:
            self.close()
            raise

    def identity(self, name: str) -> dict[str, Any]:
        """Where site `name` runs: boot id, machine id, namespaces (agent.hello; here: ours)."""
        ep = self.endpoints.get(name)
        if ep is None or ep.agent is None:
            from ..remote.agent.journal import machine_identity
            return dict(machine_identity())
        return dict(ep.agent.hello)

    def _shared_machine(self) -> dict[str, Any] | None:
        """Do the two sites run on one machine (sshd in containers or namespaces of one box,
        one host under two names)? See machine_groups; None when they do not."""
        groups = machine_groups({n: self.identity(n) for n in ("a", "b")}, self.target,
                                self._sees)
        if not groups:
            return None
        return {k: v for k, v in groups[0].items() if k != "sites"}

    def _sees(self, owner: str, other: str) -> bool:
        """Does site `other` see site `owner`'s agent directory (one filesystem)?"""
        eo, ex = self.endpoints.get(owner), self.endpoints.get(other)
        if eo is None or ex is None or eo.agent is None or ex.agent is None:
            return False
        return sees_state(eo.agent, ex.agent)

    def _check_ipv6(self, needs_ipv6: str) -> None:
        """IPv6 underlay addresses are never guessed (detection follows the IPv4 route):
        refuse, before connecting, tunnels that need one when a site has none."""
        if not needs_ipv6:
            return
        bare = [n for n in ("a", "b") if not self.specs[n].underlay6]
        if bare:
            first = bare[0]
            raise SpecError(
                f"{needs_ipv6} run over an IPv6 underlay, but site(s) {', '.join(bare)} have "
                "no underlay6 address",
                f"give it in the experiment file: [sites] {first} = {{ target = "
                f"\"{self.specs[first].target}\", underlay6 = \"2001:db8::{first}\" }} "
                "(an address of that host on the underlay interface)")

    def view(self, name: str) -> AgentView | None:
        """Site `name` for capability checks (None: this host, a `local` site)."""
        ep = self.endpoints.get(name)
        if ep is None or ep.agent is None:
            return None
        if name not in self._views or self._views[name].agent is not ep.agent:
            self._views[name] = AgentView(f"site {name} ({self.target(name)})", ep.agent)
        return self._views[name]

    def _run(self, name: str) -> Any:
        ep = self.endpoints.get(name)
        if ep is None:
            return proc.run
        assert ep.agent is not None
        return ep.agent.run

    def target(self, name: str) -> str:
        return self.specs[name].target

    def _peer_addr(self, name: str) -> str:
        """An address of site `name` the other site can reach."""
        spec = self.specs[name]
        if spec.underlay4:
            return spec.underlay4
        if not spec.local:
            return self.endpoints[name].mgmt["address"]
        other = "b" if name == "a" else "a"
        return self.endpoints[other].mgmt["peer"]   # this host, as the other site sees it

    def _resolve(self) -> None:
        for name, other in (("a", "b"), ("b", "a")):
            spec, run = self.specs[name], self._run(name)
            peer = self._peer_addr(other)
            dev, src = route_to(run, peer)
            if not dev:
                raise UnavailableError(
                    f"no route from site {name} ({spec.target}) to site {other}'s address "
                    f"{peer}", f"fix routing, or give sites.{other}.underlay4; nothing was "
                    "changed")
            ping = run(["ping", "-c", "1", "-W", "2", "-n", peer], check=False, timeout=10)
            if not ping.ok:
                raise UnavailableError(
                    f"site {name} ({spec.target}) cannot reach site {other} at {peer} "
                    "(no ping reply)", "check firewalls and routing between the hosts; "
                    "nothing was changed")
            if spec.local:
                mgmt_dev = dev   # this host reaches the remote site (and its SSH) over it
            else:
                mgmt_dev = self.endpoints[name].mgmt.get("dev", "")
            self.resolved[name] = Resolved(spec.underlay_if or dev, spec.underlay4 or src,
                                           spec.underlay6, mgmt_dev)

    def _check_management(self, mtus: tuple[int, ...], shaping: bool,
                          takes_underlay: str = "", offloads: str = "") -> None:
        """Refuse, before any change, what would touch the path carrying the SSH session."""
        for name, r in self.resolved.items():
            spec = self.specs[name]
            ep = self.endpoints.get(name)
            addrs = [ep.mgmt.get("peer", ""), ep.mgmt.get("address", "")] if ep else []
            for a in filter(None, addrs):
                if any(ipaddress.ip_address(a) in net for net in INNER_NETS):
                    raise SpecError(f"site {name} ({spec.target}) is reached over {a}, inside "
                                    "the tunnels' inner range 198.19.0.0/16 / 2001:2::/48: a "
                                    "tunnel address would shadow the SSH route",
                                    "reach the host over another address")
            if r.dev != r.mgmt_dev:
                continue
            current = int(self.link_mtu(name, r.dev))
            for mtu in mtus:
                if mtu != current:
                    raise SpecError(f"refusing MTU {mtu} on {r.dev} of site {name} "
                                    f"({spec.target}): it carries the SSH session (its MTU "
                                    f"is {current})", f"use --mtu {current}, or give "
                                    f"sites.{name}.underlay_if another interface")
            if offloads:
                raise SpecError(f"refusing --offloads {offloads} on {r.dev} of site {name} "
                                f"({spec.target}): it carries the SSH session (ethtool -K "
                                "resets the link on many NICs)",
                                f"give sites.{name}.underlay_if another interface, or "
                                "measure without offload variants")
            if shaping:
                raise SpecError(f"refusing --rate/--delay/--loss on {r.dev} of site {name} "
                                f"({spec.target}): it carries the SSH session",
                                f"give sites.{name}.underlay_if another interface")
            if takes_underlay:
                raise SpecError(f"refusing {takes_underlay} on site {name} ({spec.target}): "
                                f"it moves the addresses of {r.dev}, which carries the SSH "
                                "session", f"give sites.{name}.underlay_if another "
                                "interface, or use datapath=system")

    def link_mtu(self, name: str, dev: str) -> int:
        ep = self.endpoints.get(name)
        if ep is None:
            from . import netlink
            return netlink.link_mtu(None, dev)
        assert ep.agent is not None
        return AgentLinks(ep.agent).mtu(dev)

    def _check_tools(self, tools: dict[str, list[str]], kernel: dict[str, list[str]]) -> None:
        """Each needed tool and kernel option on each site (-> what needs it), all problems
        at once. A kernel whose configuration cannot be read is not judged."""
        want = list(dict.fromkeys([*BASE_TOOLS, *tools]))
        problems = []
        for name in ("a", "b"):
            conf = self._kernel_config(name)
            absent = [o for o in kernel if conf is not None and conf.get(o, "n") not in ("y", "m")]
            if absent:
                problems.append(f"site {name} ({self.target(name)}): kernel lacks "
                                + ", ".join(f"{o} ({', '.join(kernel[o])})" for o in absent))
            run = self._run(name)
            found = run(["sh", "-c", proc.WHICH_SH, "tb-which", *want], timeout=20).stdout.split()
            missing = [t for t, p in zip(want, found) if p == "-"]
            if not missing:
                continue
            rel = run(["cat", "/etc/os-release"], check=False, timeout=10).stdout
            problems.append(lacks_tools(name, self.target(name), missing, rel))
        if problems:
            raise UnavailableError("cannot run this experiment on these sites: "
                                   + "; ".join(problems), "nothing was changed")

    def _kernel_config(self, name: str) -> dict[str, str] | None:
        ep = self.endpoints.get(name)
        if ep is None:
            from ..capabilities import kernel_config
            return kernel_config()
        assert ep.agent is not None
        return ep.agent.kernel_config()

    # -- per case -------------------------------------------------------------------------
    def heal(self) -> list[str]:
        """Reconnect every site whose connection dropped (the new agent sweeps what the old
        one left). A host that stays unreachable raises its connect error."""
        return heal_endpoints(self.endpoints)

    def build(self, run_id: str, ledger: Ledger, *, mtu: int, rate: str | None = None,
              netem: Any = None, workdir: Path | None = None, chain: Any = None) -> Any:
        from .base import Testbed
        from .local import make_workdir, tbf_args
        from .netem import qdisc_argvs
        if chain is not None and chain.hops:   # the sites and functions as namespaces there
            from ..chain import hosts as chain_hosts
            tb = chain_hosts.build(self, run_id, ledger, chain, mtu=mtu, workdir=workdir)
            tb.notes["hosts"] = {n: self._host_record(n) for n in ("a", "b")}
            tb.notes["clock"] = self.clock()
            return tb
        workdir = make_workdir(run_id, ledger, workdir)
        sites: list[Site] = []
        hosts: dict[str, Any] = {}
        for name in ("a", "b"):
            spec, r = self.specs[name], self.resolved[name]
            ep = self.endpoints.get(name)
            site: Site
            if ep is None:
                site = Site(name, None, r.dev, r.addr4, r.addr6, host=LOCAL)
                hosts[name] = {"target": LOCAL, **_local_host()}
            else:
                if not ep.alive:
                    raise TunbenchError(f"site {name} ({spec.target}) is not connected",
                                        "a tunbench bug: report it")
                assert ep.agent is not None
                # per site: two sites on one machine may share one /run (docs/remote.md)
                wd = f"{REMOTE_ROOT}/{run_id}-{name}"
                ep.agent.mkdir(wd)
                ledger.add("remote", agent=ep.agent.agent_id, op="remove", name=wd,
                           args={"path": wd})
                site = RemoteSite(name, None, r.dev, r.addr4, r.addr6, host=spec.target,
                                  agent=ep.agent, workdir=wd, mgmt_if=r.mgmt_dev)
                h = ep.agent.hello
                hosts[name] = {"target": spec.target, "hostname": h.get("hostname"),
                               "kernel": h.get("kernel"), "machine": h.get("machine"),
                               "ssh": dict(ep.mgmt), "heartbeat_s": ep.agent.heartbeat,
                               "boot_id": h.get("boot_id")}
            self._underlay(site, ledger, mtu)
            for argv in qdisc_argvs(site.underlay_if, netem, rate,
                                    tbf_args(rate) if rate else []):
                site.run(argv, timeout=10)
                self._undo_run(site, ledger, ["tc", "qdisc", "del", "dev", site.underlay_if,
                                              "root"])
            sites.append(site)
        a, b = sites
        tb = Testbed("hosts", run_id, a, b, mtu, ledger, workdir, rate=rate,
                     shares_cpus=self.shared is not None)
        tb.notes["hosts"] = hosts
        if self.shared is not None:   # one machine: one set of CPUs for both ends
            tb.notes["shared_machine"] = dict(self.shared)
        tb.notes["clock"] = self.clock()
        if self.impls:   # impl=auto, decided from the sites' own kernels and tools
            tb.notes["impl_auto"] = {label: c.describe() for label, c in self.impls.items()}
        if netem is not None and netem.active:
            tb.notes["netem"] = netem.describe()
        return tb

    def _host_record(self, name: str) -> dict[str, Any]:
        ep = self.endpoints[name]
        h = ep.agent.hello if ep.agent is not None else {}
        return {"target": self.target(name), "hostname": h.get("hostname"),
                "kernel": h.get("kernel"), "machine": h.get("machine"), "ssh": dict(ep.mgmt),
                "underlay_if": self.resolved[name].dev, "underlay4": self.resolved[name].addr4}

    @staticmethod
    def _undo_run(site: Site, ledger: Ledger, argv: list[str]) -> None:
        site.record_command(ledger, argv)

    def _underlay(self, site: Site, ledger: Ledger, mtu: int) -> None:
        """The underlay MTU of the case, set (and set back at teardown) only where it
        differs; the management interface was refused before (open)."""
        current = site.links.mtu(site.underlay_if)
        if current == mtu:
            return
        keep = self.resolved[site.name].mgmt_dev
        if isinstance(site, RemoteSite):
            site._agent().call("link_set", wait=30, ifname=site.underlay_if,
                               attrs={"mtu": mtu}, keep=keep)
            ledger.add("remote", agent=site._agent().agent_id, op="link_set",
                       name=site.underlay_if, args={"ifname": site.underlay_if,
                                                    "attrs": {"mtu": current}, "keep": keep})
        else:
            if site.underlay_if == keep:
                raise SpecError(f"refusing to change the MTU of {keep}: it carries the SSH "
                                "session", "give the site another underlay interface")
            site.links.set_link(site.underlay_if, mtu=mtu)
            ledger.command(["ip", "link", "set", "dev", site.underlay_if, "mtu", str(current)])

    def clock(self) -> dict[str, Any]:
        """Each remote site's wall clock minus ours, and b's minus a's, with the error bound
        (half the round trip): one-way delays between the sites mean something only when
        the offset is known this well."""
        per: dict[str, tuple[float, float]] = {}
        for name in ("a", "b"):
            ep = self.endpoints.get(name)
            if ep is None or ep.agent is None:
                per[name] = (0.0, 0.0)
            else:
                per[name] = ep.agent.clock_offset(samples=5)
        off = per["b"][0] - per["a"][0]
        err = (per["a"][1] + per["b"][1]) / 2
        return {"offset_b_minus_a_ms": round(off * 1000, 3), "error_ms": round(err * 1000, 3),
                "sites": {n: {"offset_ms": round(o * 1000, 3), "rtt_ms": round(t * 1000, 3)}
                          for n, (o, t) in per.items()}}

    def log_tails(self, tb: Any, lines: int = 20) -> list[str]:
        """The tails of the case's logs on each remote site (read through its agent)."""
        return site_log_tails(tb.sites(), lines)

    def close(self) -> None:
        for ep in self.endpoints.values():
            ep.close()

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _local_host() -> dict[str, Any]:
    import os
    u = os.uname()
    return {"hostname": u.nodename, "kernel": u.release, "machine": u.machine}
