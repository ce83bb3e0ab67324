"""What a case on the hub testbed (`--testbed hub --spokes N`) builds, measures and records: a
hub site and N spoke sites (testbed/hub.py), the tunnel kind brought up hub <-> every spoke,
TCP measured to one spoke and to all spokes at once. Reached through the hub topology's
contract (topologies/hub.py: `build`, `measure`, `record`); runner.run_case is the case's
frame (run id, ledger, failure, teardown, the document), as for every topology.

What a case records (its `hub` section and metrics), the comparison issue 14 asks for:
- `hub_setup_s`: time to build the hub's side of N tunnels (the kernel: N VXLAN devices with
  address, route and neighbour in one `ip -batch`; tbtun: load/pin, N rules in one `bpftool
  batch`, attach, one route). The spokes' side is the same for every kind and not in it;
- `hub_memory_kb`: kernel memory that setup added (/proc/meminfo Slab + Percpu +
  VmallocUsed after - before: the whole host's, so noisy on a shared host); tbtun's exact map
  memory (`bytes_memlock`) next to it;
- `throughput`: one TCP stream hub -> spoke 1 (iperf3's own figure, warm-up omitted);
- `throughput_all`: one stream from the hub to each spoke at once (at most ALL_MAX spokes: a
  small host cannot usefully run 1000 iperf3 pairs), the bytes all of them received over the
  wall time from the first start to the last end (summing each client's rate would overstate
  it: starting many clients takes a while, so their intervals do not fully overlap).
`native` is the baseline: the same paths without a tunnel (hub -> spokes' underlay addresses
through the router, or over the hosts' own underlay), so every ratio has its reference in the
same campaign. On hosts (`[sites]` hub, s1..sN; testbed/hubhosts.py) the same case runs
with every process started on its host through that host's agent, and the record says where
each site was (`testbed.sites`) and what each spoke's VXLAN device received. CPU is not
sampled here (the figures are the hub's costs, not per-site CPU); sites on one machine (one
kernel boot id) are recorded as sharing its CPUs: `testbed.shared_by_sites`,
`testbed.shared_machine` (one group per machine) and each site's `shared_by_sites` and
`shares_cpus_with` in `testbed.sites`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import proc, tunnels
from .errors import CommandFailed
from .plan import Case
from .progress import SETUP, PhaseEvent, ProgressSink
from .results.model import MetricRecord
from .spec import Experiment
from .tbtun import hub as tbhub
from .testbed import hub, local, topology
from .testbed.base import Site
from .testbed.hubhosts import HubHosts
from .testbed.ledger import Ledger
from .testbed.remote import RemoteSite

ALL_MAX = 100


def targets(kind: str, h: hub.Hub) -> list[str]:
    """The address of each spoke that traffic goes to: inner through a tunnel, underlay for
    the native baseline."""
    return [s.underlay4 if kind == "native" else s.inner4 for s in h.spokes]


def bring_up(kind: str, h: hub.Hub, params: Any, obj: str | None = None) -> dict[str, Any]:
    """The hub's side of `kind` towards every spoke; what was made (for the case's record):
    the driver's hub variant (hub_up). `obj`: what its hub_ship put on the hub's host."""
    return tunnels.get(kind).hub_up(h, params, obj)


def _spawn(site: Site, argv: list[str], workdir: Path, label: str) -> proc.Process:
    """A process on `site`, its log in the case directory there (a host's own, or ours)."""
    wd = Path(site.workdir) if isinstance(site, RemoteSite) else workdir
    return site.spawn(argv, wd, label, env=None, split_stderr=False)


def stream_to(h: hub.Hub, spokes: list[tuple[hub.Spoke, str]], seconds: float, workdir: Path,
              omit: float = 0) -> tuple[float, list[dict[str, Any]]]:
    """One TCP stream from the hub to each (spoke, address) at once: Mbit/s received by all of
    them over the wall time from the first client's start to the last one's end, and each
    client's iperf3 end summary. Every process is stopped before this returns."""
    servers: list[proc.Process] = []
    clients: list[proc.Process] = []
    try:
        for s, addr in spokes:
            # --forceflush: its log is a file, "Server listening" must not wait in a buffer
            servers.append(_spawn(s.site, ["iperf3", "-s", "-1", "--forceflush", "-B", addr],
                                  workdir, f"iperf3-s{s.index}"))
        for srv in servers:
            proc.wait_ready(srv, ready_text="Server listening", timeout=60)
        t0 = time.monotonic()
        for s, addr in spokes:
            clients.append(_spawn(
                h.site, ["iperf3", "-c", addr, "-t", f"{seconds:g}", "-J",
                         *(["-O", f"{omit:g}"] if omit else [])],
                workdir, f"iperf3-c{s.index}"))
        ends, total = [], 0.0
        for (s, addr), c in zip(spokes, clients, strict=True):
            c.wait(timeout=seconds + omit + 60)
            try:
                doc = json.loads(c.output())
            except ValueError:
                raise CommandFailed(f"iperf3 to spoke {s.index} ({addr}) printed no JSON",
                                    "see the case's error_log") from None
            if "error" in doc:
                raise CommandFailed(f"iperf3 to spoke {s.index} ({addr}): {doc['error']}",
                                    "see the case's error_log")
            end = doc.get("end", {})
            ends.append(end)
            total += float(end.get("sum_received", {}).get("bytes", 0))
        return total * 8 / (time.monotonic() - t0) / 1e6, ends
    finally:
        for p in clients + servers:
            p.stop()


def wait_reachable(h: hub.Hub, addr: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if h.run(["ping", "-c", "1", "-W", "1", "-n", addr], check=False, timeout=5).ok:
            return
    raise CommandFailed(f"spoke {addr} does not answer ping from the hub within {timeout:g}s",
                        "see the case's error_log")


def measure(exp: Experiment, case: Case, h: hub.Hub, workdir: Path,
            progress: ProgressSink) -> tuple[dict[str, Any], dict[str, MetricRecord], Any]:
    """Bring the kind up on the hub and measure; (hub section, metrics, raw)."""
    kind = case.tunnel.kind
    progress(PhaseEvent(SETUP, f"{kind} on the hub towards {len(h.spokes)} spokes"))
    obj = tunnels.get(kind).hub_ship(h)
    mem0, t0 = tbhub.kernel_memory_kb(h.site), time.monotonic()
    made = bring_up(kind, h, case.tunnel.params, obj)
    setup_s = time.monotonic() - t0
    mem_kb = tbhub.kernel_memory_kb(h.site) - mem0
    if "pins" in made:
        made["maps_kb"] = round(tbhub.map_memory(Path(made["pins"]), h.site) / 1024, 1)
    addrs = targets(kind, h)
    progress(PhaseEvent(SETUP, f"ping spoke 1 through {kind}"))
    wait_reachable(h, addrs[0])
    progress(PhaseEvent("measuring", "one spoke", expected_s=exp.duration + exp.warmup,
                        warmup_s=exp.warmup))
    _, (one,) = stream_to(h, [(h.spokes[0], addrs[0])], exp.duration, workdir, exp.warmup)
    n_all = min(len(h.spokes), ALL_MAX)
    progress(PhaseEvent("measuring", f"all {n_all} spokes at once", expected_s=exp.duration))
    agg, ends = stream_to(h, list(zip(h.spokes[:n_all], addrs[:n_all], strict=True)),
                          exp.duration, workdir)
    silent = [s.index for s, e in zip(h.spokes, ends, strict=False)
              if not e.get("sum_received", {}).get("bytes")]
    if silent:
        raise CommandFailed(f"spoke(s) {', '.join(map(str, silent))} received nothing while "
                            "all spokes were measured", "see the case's error_log")
    one_mbps = float(one["sum_received"]["bits_per_second"]) / 1e6
    section = {"spokes": len(h.spokes), "kind": kind, "setup_s": round(setup_s, 4),
               "memory_kb": mem_kb, "one_mbps": round(one_mbps, 1),
               "all_mbps": round(agg, 1), "all_spokes": n_all,
               "per_spoke_mbps": [round(float(e["sum_received"]["bytes"]) * 8 / 1e6
                                        / max(exp.duration, 1e-9), 1) for e in ends],
               **made}
    metrics = {
        "throughput": MetricRecord("throughput", round(one_mbps, 1), "Mbit/s"),
        "throughput_all": MetricRecord("throughput_all", round(agg, 1), "Mbit/s"),
        "retransmits": MetricRecord("retransmits",
                                    float(one.get("sum_sent", {}).get("retransmits", 0)),
                                    "segments", False),
        "hub_setup": MetricRecord("hub_setup", round(setup_s, 4), "s", False),
        "hub_memory": MetricRecord("hub_memory", float(mem_kb), "kB", False)}
    if "maps_kb" in made:
        metrics["hub_maps_memory"] = MetricRecord("hub_maps_memory", made["maps_kb"], "kB",
                                                  False)
    return section, metrics, {"one": one, "all": ends}


def counters(kind: str, section: dict[str, Any], h: hub.Hub) -> dict[str, Any] | None:
    """tbtun's own counters on the hub (proof the rules carried the traffic); on hosts also
    what each spoke's VXLAN device received (proof each host was reached)."""
    out: dict[str, Any] = {}
    if h.on_hosts and kind != "native":
        out["spoke_rx_packets"] = {f"s{s.index}": s.site.links.stats(s.vxlan_if)["rx_packets"]
                                   for s in h.spokes}
    out.update(tunnels.get(kind).hub_counters(section, h))
    return out or None


def log_tails(workdir: Path | None, lines: int = 10, h: hub.Hub | None = None
              ) -> str | None:
    """The last lines of every process log of a failed case, read before teardown removes
    them (on hosts: each site's, through its agent)."""
    out = local.workdir_log_tails(workdir, lines)
    if h is not None and h.on_hosts:
        out += topology.site_log_tails([h.site, *(s.site for s in h.spokes)], lines)
    return "\n".join(out) or None


@dataclass
class HubBed:
    """A hub case's testbed (topologies/hub.py `build`) and what its measurement found so
    far (`measure` fills it as it goes, so a failure keeps what was measured)."""

    hub: hub.Hub
    workdir: Path
    testbed: dict[str, Any]              # the case's `testbed` record
    section: dict[str, Any] = field(default_factory=dict)        # the case's `hub` section
    metrics: dict[str, MetricRecord] = field(default_factory=dict)
    raw: Any = field(default_factory=dict)
    counters: dict[str, Any] | None = None


def setup_text(exp: Experiment, hosts: HubHosts | None) -> str:
    assert exp.hub is not None
    where = f"on {len(hosts.specs)} hosts" if hosts is not None else "here"
    return f"hub testbed with {exp.hub.spokes} spokes {where}"


def build(exp: Experiment, run_id: str, ledger: Ledger, hosts: HubHosts | None) -> HubBed:
    """The case directory, and the hub with its spokes: namespaces here (testbed/hub.py) or
    `hosts`' hosts (testbed/hubhosts.py); its record says how long that took (`build_s`)."""
    assert exp.hub is not None
    t0 = time.monotonic()
    workdir = local.make_workdir(run_id, ledger)
    testbed: dict[str, Any]
    if hosts is not None:
        h = hosts.build(run_id, ledger)
        testbed = {"kind": "hub", "on": "hosts", "spokes": len(h.spokes),
                   "sites": hosts.describe(), "underlay_mtu": h.underlay_mtu,
                   "inner_mtu": h.inner_mtu, "underlay_if": h.underlay_if,
                   "hub_underlay4": h.underlay4, "hub_inner4": h.inner4,
                   "spoke_tunnel": "kernel vxlan (VNI = spoke index)",
                   **hosts.sharing()}
    else:
        h = hub.build(run_id, ledger, exp.hub.spokes)
        testbed = hub.describe(h)
    testbed["build_s"] = round(time.monotonic() - t0, 3)
    return HubBed(h, workdir, testbed)


def measure_case(exp: Experiment, case: Case, bed: HubBed, progress: ProgressSink) -> None:
    """The kind up on the hub, TCP to one spoke and to all, the hub's counters: into `bed`."""
    bed.section, bed.metrics, bed.raw = measure(exp, case, bed.hub, bed.workdir, progress)
    bed.counters = counters(case.tunnel.kind, bed.section, bed.hub)


def record(case: Case, bed: HubBed | None) -> dict[str, Any]:
    """The case document's parts (results.model.case_document's keywords) and, under
    `sections`, the `hub` section when something was measured; `bed` None: the build
    failed."""
    h = bed.hub if bed is not None else None
    section = bed.section if bed is not None else {}
    kind = case.tunnel.kind
    return {
        "testbed": bed.testbed if bed is not None else None,
        "tunnel": {"kind": kind,
                   "mtu": (h.inner_mtu if h else hub.INNER_MTU) if kind != "native"
                   else (h.underlay_mtu if h else 1500),
                   "overhead": 0 if kind == "native" else hub.OVERHEAD,
                   "info": {k: v for k, v in section.items() if k in (
                       "devices", "attach_points", "rules", "pins", "decap",
                       "created_with")}},
        "metrics": dict(bed.metrics) if bed is not None else {}, "series": {}, "cpu": None,
        "counters": {"after": bed.counters} if bed is not None and bed.counters else None,
        "raw": bed.raw if bed is not None else {}, "offloads": None,
        "sections": {"hub": section} if section else {}}
