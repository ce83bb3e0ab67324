"""CPU per core as the cases recorded it, and the one-core bottleneck.

The study's key encryption finding is a core count, not a percentage: one IPsec SA is
processed on one core, so a tunnel can sit at a fraction of native while the machine as a
whole looks half idle. The all-cores average hides that. Here each 1 s sample's cores are
ranked by how busy they were (busiest first), and the ranks are averaged over the samples and
repeats: threads migrate between cores, so "cpu0" and "cpu1" averaged separately would smear
a saturated core over both. A bottleneck shows in either of two ways:

- a recorded thread ran at >= SATURATED % of one core (a thread cannot use more: that
  thread's work is bound by one core, whatever the other cores did; this holds on a host
  shared with other work too, where /proc/stat's cores are full of someone else's load);
- the busiest core near 100 % while another has room (kernel work such as softirq, which
  no tracked process is charged for).

The process named is read from the per-process CPU the case recorded (the busiest thread of
each tracked process: charon, wireguard-go, ovs-vswitchd, sshd, ksoftirqd, the traffic
tools).

Sites on separate hosts (`cpu.shared_by_sites: false`) are profiled apart, one profile per
end (`cpu.sites.a`, `cpu.sites.b`, each with its own cores and processes; which one sent is
the direction the workload ran, as its case recorded it: site b under iperf3 -R): a bottleneck is then named with the end it is on.

Pure over the case documents; nothing here asks a registry what a tunnel is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..results.records import CaseRecord
from . import metrics as catalogue
from .data import Campaign, Scenario

SATURATED = 85.0      # % busy: the busiest core is (near) full; or a thread this busy
ROOM = 30.0           # points below it another core must stay to call it one-core bound
THREAD_FULL = 60.0    # % of one core: a thread this busy is named as the core's user
_PID = re.compile(r"\[\d+\]$")

# a comm read before the wrapper exec'd the tool (python: testbed/cgjoin.py, privrun)
WRAPPERS = ("ip", "nsenter", "env", "python", "python3")


@dataclass
class CoreProfile:
    """One tunnel in one scenario: cores ranked per sample, averaged over samples/repeats."""
    tunnel: str
    scenario: Scenario
    busy: list[float]                        # rank 0 = busiest core
    parts: list[dict[str, float]]            # per rank: usr, sys, softirq (incl. irq)
    samples: int
    shared_by_sites: bool
    processes: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> averages
    site: str = ""    # "a"/"b": one end of sites on separate hosts; "": both (one host)
    direction: str | None = None   # how the workload ran: which end sent (records)

    @property
    def end(self) -> str:
        """'sender (site a)'; 'receiver (site a)' when the workload ran reversed (-R)."""
        return catalogue.end(self.site, self.direction) if self.site else ""

    @property
    def cores(self) -> int:
        return len(self.busy)


def _process_name(label: str, entry: dict[str, Any]) -> str:
    """What to call a tracked process: its command name ("wireguard-go", "charon"), else its
    label without the PID ("iperf3-client", "datapath-a") for files recorded before comm."""
    comm = str(entry.get("comm") or "")
    comm = "" if comm in WRAPPERS else comm
    base = _PID.sub("", label)
    if comm and comm != base and not base.startswith(comm):
        return f"{comm} ({base})" if base.startswith("datapath") else comm
    return base


def _ranked(samples: list[dict[str, Any]]) -> list[list[dict[str, float]]]:
    """Per sample: the per-core usages (not the 'cpu' total), busiest first."""
    out = []
    for s in samples:
        cores = [u for name, u in (s.get("cpus") or {}).items() if name != "cpu"]
        if cores:
            out.append(sorted(cores, key=lambda u: -float(u.get("busy", 0.0))))
    return out


def _ends(case: CaseRecord) -> list[tuple[str, dict[str, Any]]]:
    """(site, cpu record) of each end of a case: both ends apart when the sites were
    separate hosts, else ("", the case's one record)."""
    cpu = case.cpu
    sites = cpu.get("sites") or {}
    if cpu.get("shared_by_sites") is False and sites:
        return sorted((name, rec) for name, rec in sites.items() if rec.get("samples"))
    return [("", cpu)] if cpu.get("samples") else []


def profiles(c: Campaign) -> list[CoreProfile]:
    # (tunnel, scenario, site) -> the CPU records of that end, one per case
    found: dict[tuple[str, Scenario, str], list[dict[str, Any]]] = {}
    for case in c.ok:
        for site, rec in _ends(case):
            found.setdefault((case.tunnel.label, case.scenario, site), []).append(
                {**rec, "shared_by_sites": case.cpu.get("shared_by_sites"),
                 "direction": case.workload.direction})
    out = []
    for (tun, scen, site), ends in found.items():
        ticks = [t for e_rec in ends for t in _ranked(e_rec["samples"])]
        n = min((len(t) for t in ticks), default=0)
        if n == 0:
            continue
        busy = [sum(float(t[i]["busy"]) for t in ticks) / len(ticks) for i in range(n)]
        parts = [{k: sum(float(t[i].get(k, 0.0)) + (float(t[i].get("irq", 0.0))
                                                     if k == "softirq" else 0.0)
                         for t in ticks) / len(ticks) for k in ("usr", "sys", "softirq")}
                 for i in range(n)]
        procs: dict[str, list[float]] = {}   # name -> [total, busiest thread], summed
        for e_rec in ends:
            seen: dict[str, list[float]] = {}
            for label, e in (e_rec.get("processes") or {}).items():
                total = float(e.get("pct_of_one_core", 0.0))
                thread = float(e.get("busiest_thread_pct", min(total, 100.0)))
                cur = seen.setdefault(_process_name(label, e), [0.0, 0.0])
                cur[0] += total                  # processes of one name: their sum,
                cur[1] = max(cur[1], thread)     # and the busiest of their threads
            for name, (total, thread) in seen.items():
                acc = procs.setdefault(name, [0.0, 0.0])
                acc[0] += total
                acc[1] += thread
        avg = {name: {"pct_of_one_core": t / len(ends), "busiest_thread_pct": b / len(ends)}
               for name, (t, b) in procs.items()}
        out.append(CoreProfile(tun, scen, busy, parts, len(ticks),
                               any(e_rec.get("shared_by_sites") for e_rec in ends), avg, site,
                               ends[0]["direction"]))
    order = c.tunnels()
    return sorted(out, key=lambda p: (c.scenarios().index(p.scenario)
                                      if p.scenario in c.scenarios() else 0,
                                      order.index(p.tunnel) if p.tunnel in order else 0,
                                      p.site))


@dataclass(frozen=True)
class Bottleneck:
    tunnel: str
    scenario: Scenario
    signature: str            # "thread" (a thread at a full core) or "cores" (one full, one not)
    busiest: float            # % busy of the busiest core
    least: float              # % busy of the least busy core
    softirq: float            # % of the busiest core in irq + softirq
    process: str | None       # who used it, from the recorded per-process CPU
    process_pct: float        # its busiest thread, % of one core
    site: str = ""            # the end it is on (sites on separate hosts), else ""
    end: str = ""             # that end as a reader reads it: 'sender (site a)'


def user_of_core(p: CoreProfile) -> tuple[str | None, float]:
    """The recorded process whose busiest thread came closest to a full core."""
    if not p.processes:
        return None, 0.0
    name, e = max(p.processes.items(), key=lambda kv: kv[1]["busiest_thread_pct"])
    pct = e["busiest_thread_pct"]
    return (name, pct) if pct >= THREAD_FULL else (None, pct)


def bottleneck(p: CoreProfile) -> Bottleneck | None:
    """A thread at a full core, or one core near full while another has room, averaged over
    the measurement; None when neither (or with a single core, where nothing idles)."""
    if p.cores < 2:
        return None
    name, pct = user_of_core(p)
    if name is not None and pct >= SATURATED:
        sig = "thread"
    elif p.busy[0] >= SATURATED and p.busy[0] - p.busy[-1] >= ROOM:
        sig = "cores"
    else:
        return None
    return Bottleneck(p.tunnel, p.scenario, sig, p.busy[0], p.busy[-1], p.parts[0]["softirq"],
                      name, pct, p.site, p.end)


def bottlenecks(c: Campaign) -> list[Bottleneck]:
    return [b for b in (bottleneck(p) for p in profiles(c)) if b is not None]
