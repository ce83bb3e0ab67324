"""The hub-and-spokes testbed on real hosts: the hub and each spoke a host of its own, reached
over SSH (`[sites]` hub, s1..sN; testbed/hubspec.py), with the same `hub.Hub` shape as the
namespace testbed (testbed/hub.py), so hubcase.py and tbtun/hub.py measure both alike.

What differs from the namespaces here:
- the underlay is the hosts' own: the hub's interface and address come from its route to the
  spokes (one interface for all of them: tbtun's single attach point), each spoke's from its
  route to the hub, as `ip route get` gives them (or sites.<name>.underlay_if / underlay4);
  its MTU is the hosts' own, never changed (inner MTU = the smallest of them - 50);
- nothing is routed through a router namespace: each spoke's next hop is what the hub's route
  to it says (the spoke itself on a shared link, else the gateway), so tbtun gets one /32
  route per spoke (tbtun/hub.py) and the kernel resolves each spoke's MAC;
- every link made on a host (the spokes' VXLAN devices, the hub's VXLAN devices or tbtun's
  holder of the inner address) is journaled there by that host's agent before it exists
  (hub.own_links) and in the local ledger (undone through the agent), so teardown, an agent
  losing its connection, and `tunbench cleanup --site` all remove it; addresses, routes and
  neighbours live on those links and go with them.
One connection and agent per host for the whole campaign (topology.Endpoint), every check
before anything is changed on any host.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from .. import proc, tunnels
from ..errors import SpecError, TunbenchError, UnavailableError
from ..remote.transport import SshOptions
from . import hub, names
from .ledger import Ledger
from .remote import REMOTE_ROOT, RemoteSite
from .topology import (
    INNER_NETS,
    AgentLinks,
    Endpoint,
    SiteSpec,
    heal_endpoints,
    lacks_tools,
    machine_groups,
    sees_state,
)

HUB = "hub"
BASE_TOOLS = ("ip", "ping", "iperf3")
SPOKE_KIND = "vxlan"     # every spoke runs the kernel's VXLAN device


def spoke_names(specs: dict[str, SiteSpec]) -> list[str]:
    return sorted((n for n in specs if n != HUB), key=lambda n: int(n[1:]))


def route(run: Any, addr: str) -> dict[str, Any]:
    """`ip -j route get addr` on a host: dev, prefsrc, gateway ({} when there is none)."""
    r = run(["ip", "-j", "route", "get", addr], check=False, timeout=15)
    if not r.ok or not r.stdout.strip():
        return {}
    found: dict[str, Any] = json.loads(r.stdout)[0]
    return found


class HubHosts:
    """The hub and its spokes on hosts for a campaign (runner.open_topology)."""

    def __init__(self, specs: dict[str, SiteSpec], options: SshOptions | None = None) -> None:
        self.specs = specs
        self.spokes = spoke_names(specs)
        self.endpoints = {n: Endpoint(s, options or SshOptions()) for n, s in specs.items()}
        self.dev: dict[str, str] = {}       # site -> underlay interface
        self.addr: dict[str, str] = {}      # site -> underlay IPv4 address
        self.nexthop: dict[str, str] = {}   # spoke -> the hub's next hop towards it
        self.mtu = 1500                     # the smallest underlay MTU of all sites
        self.impls: dict[str, Any] = {}     # as Topology's (impl=auto): no kind here has one
        self.shared: list[dict[str, Any]] = []   # sites that share one machine (its CPUs)

    def target(self, name: str) -> str:
        return self.specs[name].target

    def _agent(self, name: str) -> Any:
        agent = self.endpoints[name].agent
        assert agent is not None
        return agent

    # -- opening: every check before anything is changed on any host ---------------------
    def open(self, kinds: list[str]) -> None:
        try:
            self.endpoints[HUB].connect()
            # spokes whose underlay4 is given: judged from the hub before connecting them
            for name in self.spokes:
                if self.specs[name].underlay4:
                    self._hub_route(name)
            for ep in self.endpoints.values():
                if not ep.alive:
                    ep.connect()
            self.shared = machine_groups(
                {n: dict(self._agent(n).hello) for n in self.specs}, self.target,
                lambda owner, other: sees_state(self._agent(owner), self._agent(other)))
            self._check_management()
            self._resolve()
            self._check_tools(kinds)
        except BaseException:
            self.close()
            raise

    def _reach(self, name: str) -> str:
        """The address of site `name` the others use: given, or the one its SSH session
        arrives on."""
        return self.specs[name].underlay4 or self.endpoints[name].mgmt["address"]

    def _check_management(self) -> None:
        for name, ep in self.endpoints.items():
            for a in filter(None, (ep.mgmt.get("peer", ""), ep.mgmt.get("address", ""),
                                   self.specs[name].underlay4)):
                if any(ipaddress.ip_address(a) in net for net in INNER_NETS):
                    raise SpecError(f"site {name} ({self.target(name)}) uses {a}, inside the "
                                    "hub's inner range 198.19.0.0/16: a spoke's inner "
                                    "address would shadow it", "reach the host over another "
                                    "address; nothing was changed")
                if ipaddress.ip_address(a).version != 4:
                    raise SpecError(f"site {name} ({self.target(name)}) is reached over IPv6 "
                                    f"({a}): the hub testbed runs over an IPv4 underlay only",
                                    f"give sites.{name}.underlay4; nothing was changed")

    def _resolve(self) -> None:
        devs: dict[str, str] = {}
        for name in self.spokes:
            r = self._hub_route(name)
            devs[name] = str(r["dev"])
            self.nexthop[name] = str(r.get("gateway") or self._reach(name))
            self.addr.setdefault(HUB, str(r.get("prefsrc", "")))
        spec = self.specs[HUB]
        if spec.underlay_if:
            self.dev[HUB] = spec.underlay_if
        elif len(set(devs.values())) > 1:
            seen = ", ".join(f"{n}: {d}" for n, d in devs.items())
            raise UnavailableError(f"the hub ({self.target(HUB)}) reaches its spokes over "
                                   f"different interfaces ({seen}): tbtun's one attach point "
                                   "needs them behind one", "give sites.hub.underlay_if, or "
                                   "route every spoke over one interface; nothing was changed")
        else:
            self.dev[HUB] = next(iter(devs.values()))
        if spec.underlay4:
            self.addr[HUB] = spec.underlay4
        hub_addr = self.addr[HUB]
        for name in self.spokes:
            run = self._agent(name).run
            r = route(run, hub_addr)
            if not r.get("dev"):
                raise UnavailableError(f"no route from site {name} ({self.target(name)}) to "
                                       f"the hub at {hub_addr}", "fix routing, or give "
                                       "sites.hub.underlay4; nothing was changed")
            ping = run(["ping", "-c", "1", "-W", "2", "-n", hub_addr], check=False, timeout=10)
            if not ping.ok:
                raise UnavailableError(f"site {name} ({self.target(name)}) cannot reach the "
                                       f"hub at {hub_addr} (no ping reply)", "check firewalls "
                                       "and routing between the hosts; nothing was changed")
            self.dev[name] = self.specs[name].underlay_if or str(r["dev"])
            self.addr[name] = self.specs[name].underlay4 or str(r.get("prefsrc", ""))
        self.mtu = min(AgentLinks(self._agent(n)).mtu(self.dev[n]) for n in self.specs)
        if self.mtu - hub.OVERHEAD < 576:
            raise UnavailableError(f"the sites' underlay MTU {self.mtu} leaves "
                                   f"{self.mtu - hub.OVERHEAD} bytes inside VXLAN",
                                   "use hosts whose underlay MTU is at least 1280")

    def _hub_route(self, name: str) -> dict[str, Any]:
        """The hub's route to spoke `name`, or one line saying there is none."""
        peer = self._reach(name)
        r = route(self._agent(HUB).run, peer)
        if not r.get("dev"):
            raise UnavailableError(f"no route from the hub ({self.target(HUB)}) to site "
                                   f"{name} at {peer}", f"fix routing, or give sites."
                                   f"{name}.underlay4; nothing was changed")
        return r

    def _check_tools(self, kinds: list[str]) -> None:
        """What each host needs: the spokes the kernel's VXLAN and iperf3; the hub also what
        each kind measured there declares (tbtun: bpftool, tc, nsenter). All at once."""
        want: dict[str, dict[str, list[str]]] = {n: {} for n in self.specs}
        kernel: dict[str, dict[str, list[str]]] = {n: {} for n in self.specs}
        for name in self.specs:
            on_hub = name == HUB
            for kind in (kinds if on_hub else [SPOKE_KIND]):
                if kind == "native":
                    continue
                drv = tunnels.get(kind)
                need = drv.declared(drv.resolve_impl(drv.default_params()))
                for t in need.tools:
                    want[name].setdefault(t.name, []).append(kind)
                for k in need.kernel:
                    kernel[name].setdefault(k.option, []).append(kind)
        problems = []
        for name in self.specs:
            agent = self._agent(name)
            tools = list(dict.fromkeys([*BASE_TOOLS, *want[name]]))
            found = agent.run(["sh", "-c", proc.WHICH_SH, "tb-which", *tools],
                              timeout=20).stdout.split()
            missing = [t for t, p in zip(tools, found, strict=False) if p == "-"]
            conf = agent.kernel_config()
            absent = [o for o in kernel[name]
                      if conf is not None and conf.get(o, "n") not in ("y", "m")]
            if absent:
                problems.append(f"site {name} ({self.target(name)}): kernel lacks "
                                + ", ".join(f"{o} ({', '.join(kernel[name][o])})"
                                            for o in absent))
            if missing:
                rel = agent.run(["cat", "/etc/os-release"], check=False, timeout=10).stdout
                problems.append(lacks_tools(name, self.target(name), missing, rel))
        if problems:
            raise UnavailableError("cannot run this hub experiment on these sites: "
                                   + "; ".join(problems), "nothing was changed")

    # -- per case -------------------------------------------------------------------------
    def build(self, run_id: str, ledger: Ledger) -> hub.Hub:
        """Each site's case directory, and every spoke's kernel VXLAN device towards the hub
        (one `ip -batch` per spoke host)."""
        sites: dict[str, RemoteSite] = {}
        for name in self.specs:
            ep = self.endpoints[name]
            if not ep.alive:
                raise TunbenchError(f"site {name} ({self.target(name)}) is not connected",
                                    "a tunbench bug: report it")
            agent = self._agent(name)
            wd = f"{REMOTE_ROOT}/{run_id}-{name}"   # per site, as testbed/topology.py
            agent.mkdir(wd)
            ledger.add("remote", agent=agent.agent_id, op="remove", name=wd, args={"path": wd})
            sites[name] = RemoteSite(name, None, self.dev[name], self.addr[name], "",
                                     host=self.target(name), agent=agent, workdir=wd,
                                     mgmt_if=ep.mgmt.get("dev", ""))
        inner_mtu = self.mtu - hub.OVERHEAD
        out = []
        for i, name in enumerate(self.spokes, start=1):
            site = sites[name]
            vx = names.link_name(run_id, "x")
            hub.own_links(site, ledger, [vx])
            hub.batch(site, hub.spoke_lines(i, vx, site.underlay4, self.addr[HUB],
                                            site.underlay_if, inner_mtu))
            out.append(hub.Spoke(i, None, site.underlay4, hub.inner(i), hub.spoke_mac(i), vx,
                                 site, self.nexthop[name]))
        h = sites[HUB]
        return hub.Hub(run_id, None, "", h.underlay_if, h.underlay4, "", hub.inner(0),
                       tuple(out), ledger, h, inner_mtu, self.mtu)

    def shares_with(self, name: str) -> list[str]:
        """The other sites on site `name`'s machine (one kernel: the same CPUs)."""
        for g in self.shared:
            if name in g["sites"]:
                return [n for n in g["sites"] if n != name]
        return []

    def sharing(self) -> dict[str, Any]:
        """The case record's word on shared CPUs: `shared_by_sites` (any two sites on one
        machine) and, when so, `shared_machine`, one group per machine (see
        topology.machine_groups)."""
        out: dict[str, Any] = {"shared_by_sites": bool(self.shared)}
        if self.shared:
            out["shared_machine"] = [dict(g) for g in self.shared]
        return out

    def describe(self) -> dict[str, Any]:
        """Where each site was, for the case's record; each site labelled with the sites that
        share its machine (its CPUs)."""
        out = {}
        for name in [HUB, *self.spokes]:
            ep = self.endpoints[name]
            hello = ep.agent.hello if ep.agent is not None else {}
            out[name] = {"target": self.target(name), "hostname": hello.get("hostname"),
                         "kernel": hello.get("kernel"), "underlay_if": self.dev[name],
                         "underlay4": self.addr[name], "ssh": dict(ep.mgmt),
                         "boot_id": hello.get("boot_id"),
                         "shared_by_sites": bool(self.shares_with(name)),
                         "shares_cpus_with": self.shares_with(name),
                         **({"nexthop4": self.nexthop[name]} if name != HUB else {})}
        return out

    def heal(self) -> list[str]:
        """Reconnect every site whose connection dropped (runner._heal, as topology.heal)."""
        return heal_endpoints(self.endpoints)

    def close(self) -> None:
        for ep in self.endpoints.values():
            ep.close()

