"""The mesh on hosts: every site s1..sN a host of its own over SSH (`[sites] s1 = ...`,
testbed/meshspec.py), one connection and agent per host for the whole campaign, and each
pair's case the pair testbed between two hosts (testbed/topology.py's `Topology.build`), the
pair's sender as site a and its receiver as site b, so every tunnel driver's bring-up between
hosts runs unchanged.

Opening checks every host and every pair of the schedule before anything is changed on any
host: each host reached with root (Endpoint.connect), no two sites in one network namespace,
each pair's route and ping both ways and the management path (`Topology._resolve`,
`_check_management`), the tools and kernel options on every host. One pair's view is a
`topology.Topology` over the two hosts' shared endpoints.

A host that drops during the campaign and cannot be reconnected (topology.heal_endpoints: 3
tries, 5 s apart) is marked down: every later case of its pairs fails at once with that
reason, and the other pairs go on (a pair campaign stops instead). `tunbench run --resume`
runs those cases again (the mesh's failed cases are rerun, topologies/mesh.py).

With `parallel = true` the pairs of one colour of the schedule run at the same time, one
thread each (lanes.py): they are disjoint, so each uses its own two endpoints, and after a
case only its own pair's sites are healed (`heal_sites`); a site marked down is a key of
`down` that only its own pair's thread writes.

One site may be `local`: this host's own network stack (as a pair's `a = "local"`). It has
no endpoint (no connection, no agent, never healed or marked down); its pairs' views are the
pair `Topology` with one local site, which resolves its route from this host, checks this
host's tools and kernel options (`_check_tools`), builds it as a `Site` here and records it
as `local`. With `parallel = true` it is one host like the others.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import TunbenchError, UnavailableError
from ..remote.agent.journal import machine_identity
from ..remote.transport import SshOptions
from .base import Testbed
from .ledger import Ledger
from .meshspec import Pair
from .topology import (
    Endpoint,
    SiteSpec,
    Topology,
    heal_endpoints,
    machine_groups,
    sees_state,
    site_log_tails,
)


class MeshHosts:
    """The sites of a mesh on hosts for a campaign (runner.open_topology)."""

    def __init__(self, specs: dict[str, SiteSpec], options: SshOptions | None = None) -> None:
        self.specs = specs
        self.options = options or SshOptions()
        # the sites on hosts; a `local` site (at most one, meshspec) has none
        self.endpoints = {n: Endpoint(s, self.options) for n, s in specs.items()
                          if not s.local}
        self.views: dict[Pair, Topology] = {}
        self.down: dict[str, str] = {}      # site -> why it stays unreachable
        self.impls: dict[str, Any] = {}     # as Topology's (impl=auto): no mesh kind has one
        self.shared: list[dict[str, Any]] = []   # sites that share one machine (its CPUs)

    def target(self, name: str) -> str:
        return self.specs[name].target

    # -- opening: every check before anything is changed on any host ---------------------
    def open(self, pairs: list[Pair], *, mtus: tuple[int, ...] = (),
             tools: dict[str, list[str]] | None = None,
             kernel: dict[str, list[str]] | None = None) -> None:
        """Connect every host, then check each (directed) pair of the schedule and the
        tools and kernel options (-> what needs them) on every host; all before any change."""
        try:
            for ep in self.endpoints.values():
                ep.connect()
            self.shared = machine_groups(
                {n: self._identity(n) for n in self.specs}, self.target, self._sees)
            for x, y in pairs:
                view = self._view(x, y)
                try:
                    view.shared = view._shared_machine()
                    view._resolve()
                    view._check_management(mtus, False)
                except TunbenchError as exc:   # named a and b: say which sites they are
                    raise type(exc)(f"mesh pair {x}-{y} (a = {x}, b = {y}): {exc.message}",
                                    exc.hint) from None
                self.views[(x, y)] = view
            checked: set[str] = set()
            for (x, y), view in self.views.items():   # each host once, through a pair of it
                if {x, y} - checked:
                    try:
                        view._check_tools(tools or {}, kernel or {})
                    except TunbenchError as exc:
                        raise type(exc)(f"mesh pair {x}-{y} (a = {x}, b = {y}): "
                                        f"{exc.message}", exc.hint) from None
                    checked |= {x, y}
        except BaseException:
            self.close()
            raise

    def _agent(self, name: str) -> Any:
        agent = self.endpoints[name].agent
        assert agent is not None
        return agent

    def _identity(self, name: str) -> dict[str, Any]:
        """Where site `name` runs (its agent's hello; the local site: this process's)."""
        if self.specs[name].local:
            return dict(machine_identity())
        return dict(self._agent(name).hello)

    def _sees(self, owner: str, other: str) -> bool:
        """Does site `other` see site `owner`'s agent directory (the local site has none)?"""
        if self.specs[owner].local or self.specs[other].local:
            return False
        return sees_state(self._agent(owner), self._agent(other))

    def _view(self, x: str, y: str) -> Topology:
        """Pair (x, y) as a two-site topology on the shared endpoints: x is a, y is b (the
        local site, if one of them, has no endpoint: the pair Topology's local site)."""
        view = Topology({"a": replace(self.specs[x], name="a"),
                         "b": replace(self.specs[y], name="b")}, self.options)
        view.endpoints = {k: self.endpoints[n] for k, n in (("a", x), ("b", y))
                          if n in self.endpoints}
        return view

    # -- per case -------------------------------------------------------------------------
    def build(self, run_id: str, ledger: Ledger, pair: Pair, *, mtu: int) -> Testbed:
        """The pair testbed between the pair's two hosts (its sender a, its receiver b); a
        site that is down (or drops now and cannot be reconnected) fails the case at once."""
        for name in pair:
            if name in self.endpoints and name not in self.down \
                    and not self.endpoints[name].alive:
                self._heal(name)
            if name in self.down:
                raise UnavailableError(
                    f"site {name} ({self.target(name)}) is unreachable: {self.down[name]}",
                    "its pairs are not measured in this campaign; `tunbench run --resume "
                    "DIR` runs them again once the host is back")
        tb: Testbed = self.views[pair].build(run_id, ledger, mtu=mtu)
        tb.notes["mesh"] = {"sites": len(self.specs), "pair": list(pair),
                            "hosts": {n: self.target(n) for n in pair}}
        return tb

    def _heal(self, name: str) -> list[str]:
        try:
            return heal_endpoints({name: self.endpoints[name]})
        except TunbenchError as exc:   # ConnectError: it stays unreachable
            self.down[name] = exc.one_line()
            return []

    def heal(self) -> list[str]:
        """After a case (runner._heal): reconnect every site whose connection dropped; one
        that stays unreachable is marked down (its pairs fail, the others go on), never
        raised: the campaign goes on."""
        healed = []
        for name, ep in self.endpoints.items():
            if name not in self.down and not ep.alive:
                healed += self._heal(name)
        return healed

    def heal_sites(self, names: tuple[str, ...]) -> list[str]:
        """As `heal`, for these sites only (a case that ran beside others, lanes.py)."""
        healed = []
        for name in names:
            if name in self.endpoints and name not in self.down \
                    and not self.endpoints[name].alive:
                healed += self._heal(name)
        return healed

    def log_tails(self, tb: Any, lines: int = 20) -> list[str]:
        """The tails of the case's logs on each of the pair's hosts (through their agents)."""
        return site_log_tails(tb.sites(), lines)

    def close(self) -> None:
        for ep in self.endpoints.values():
            ep.close()
