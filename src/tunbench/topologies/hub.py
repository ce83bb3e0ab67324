"""hub: one hub site and N spoke sites, the tunnel kind brought up hub <-> every spoke, TCP
measured to one spoke and to all at once (hubcase.py, testbed/hub.py, testbed/hubhosts.py).
It measures itself: its case is not a tunnel between two sites."""

from __future__ import annotations

from typing import Any

from .. import hubcase, tunnels
from ..errors import SpecError
from ..progress import ProgressSink
from ..remote.transport import SshOptions
from ..testbed import hub, hubspec
from ..testbed.hub import MAX_SPOKES
from ..testbed.hubhosts import HubHosts
from ..testbed.ledger import Ledger
from .base import Topology, TopoNeeds, TopoParam, check_mtu


class Hub(Topology):
    name = "hub"
    summary = "one hub and N spokes: the hub's side of N tunnels (setup, memory, TCP)"
    chosen_by = '[testbed] kind = "hub" (--testbed hub)'
    measures_itself = True   # its case is N tunnels from one hub, not one between a and b
    params = (
        TopoParam("[testbed] kind", "--testbed", "pair", '"hub" for this topology'),
        TopoParam("[testbed] spokes", "--spokes", str(hubspec.DEFAULT_SPOKES),
                  f"spoke sites, 1..{MAX_SPOKES} (on hosts: the number of sN sites given, "
                  f"at most {hubspec.MAX_HOST_SPOKES})"),
        TopoParam("[sites] hub, s1..sN", "--site hub=TARGET --site s1=TARGET ...",
                  "namespaces here", "the hub and each spoke on a host of its own, over SSH"),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds(tools=("ip", "ping", "iperf3"),
                         kernel=("CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_VXLAN"),
                         hosts="none (1 + N namespaces here), or 1 + N hosts over SSH")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        return tunnels.hub_kinds()

    @classmethod
    def workloads(cls) -> tuple[str, ...] | None:
        return hubspec.HUB_WORKLOADS

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return exp.hub is not None

    @classmethod
    def check(cls, exp: Any, case: Any, hosts: Any = None) -> None:
        """The spoke count, the kind a hub variant exists for, hosts opened as a hub's."""
        check_mtu(case.mtu)
        hub.check_spokes(exp.hub.spokes)
        if case.tunnel.kind not in tunnels.hub_kinds():
            raise SpecError(f"tunnel kind {case.tunnel.kind} has no hub variant",
                            f"the hub runs {', '.join(tunnels.hub_kinds())}")
        if hosts is not None and not isinstance(hosts, HubHosts):
            raise SpecError("the hub's sites were not opened as a hub and its spokes",
                            "give [sites] hub, s1..sN: runner.open_topology opens them so")

    @classmethod
    def open(cls, exp: Any, ssh: SshOptions) -> HubHosts:
        """The hub and its spokes on hosts (testbed/hubhosts.py), each checked for the kinds'
        hub variants."""
        hosts = HubHosts(exp.sites, ssh)
        hosts.open([t.kind for t in exp.tunnels])
        return hosts

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> hubcase.HubBed:
        cls.check(exp, case, hosts)
        return hubcase.build(exp, run_id, ledger, hosts)

    @classmethod
    def setup_text(cls, exp: Any, case: Any, hosts: Any = None) -> str:
        return hubcase.setup_text(exp, hosts)

    @classmethod
    def measurements(cls, exp: Any) -> int:
        return 2   # one spoke, then every spoke at once

    @classmethod
    def log_tails(cls, built: Any, hosts: Any = None, lines: int = 10) -> str | None:
        """The case directory's logs and, on hosts, every site's."""
        if not isinstance(built, hubcase.HubBed):
            return None
        return hubcase.log_tails(built.workdir, lines, built.hub)

    @classmethod
    def measure(cls, exp: Any, case: Any, built: Any, progress: ProgressSink) -> None:
        hubcase.measure_case(exp, case, built, progress)

    @classmethod
    def record(cls, exp: Any, case: Any, built: Any) -> dict[str, Any]:
        return hubcase.record(case, built)


TOPOLOGY = Hub
