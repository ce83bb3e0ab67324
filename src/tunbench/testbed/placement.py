"""Per-site CPU placement: each site of a testbed on its own CPUs.

With placement on, every process a site starts through `Testbed.spawn` (iperf3, sockperf, the
load generator, wireguard-go, charon, ovs-vswitchd, tbagg, ...) is started confined to the
site's CPU set (`taskset -c CPUS argv...`: the affinity is set before the program's first
instruction and inherited by its threads and children; `taskset` execs the program, so the PID
we hold stays the program's own), and the receive work of the site's underlay device is
steered to the same set by RPS (`/sys/class/net/DEV/queues/rx-N/rps_cpus`, written inside the
site's namespace). Every rps_cpus written is set back at teardown through the ledger.
Mode `processes` confines the processes the same way and leaves the receive work where the
kernel puts it (on veth: the sending CPU's softirq), which keeps the fast layout (sender
and receiver apart, the receive path on the sender's CPU) without RPS's cross-CPU hand-off.

On the local testbed the CPUs this process may use are split in two contiguous halves (site a
the lower, site b the upper); on hosts each site uses the `cpus` of its `[sites]` entry (a
site without one is left unconfined). One CPU (or none given): nothing is confined, and the
case records why.

See docs/methodology.md ("CPU placement").
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import TunbenchError

MODES = ("sites", "processes", "off")
DEFAULT_MODE = "processes"   # measured: docs/methodology.md, "CPU placement"
_RANGE_RE = re.compile(r"^(\d{1,4})(?:-(\d{1,4}))?$")


# ---- CPU lists (the kernel's cpulist format: "0-2,5") -----------------------------------
def parse_cpus(text: str) -> tuple[int, ...]:
    """CPU numbers of a cpulist ("2-5", "0,2", "0-1,4-5"), sorted; ValueError naming the
    problem otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not a CPU list (e.g. 2-5 or 0,2)")
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        m = _RANGE_RE.match(part)
        if not m:
            raise ValueError(f"{text!r} is not a CPU list (e.g. 2-5 or 0,2): bad part {part!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"{text!r} is not a CPU list: range {part} runs backwards")
        cpus.update(range(lo, hi + 1))
    return tuple(sorted(cpus))


def format_cpus(cpus: Iterable[int]) -> str:
    """The shortest cpulist of `cpus` ("0-3,6")."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(_span(run))
        run = [c]
    if run:
        out.append(_span(run))
    return ",".join(out)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def split_cpus(cpus: Iterable[int], parts: int = 2) -> list[tuple[int, ...]] | None:
    """`cpus` in `parts` contiguous sets as even as possible (lower ones first; an odd CPU
    goes to the later sets), or None when there are fewer CPUs than parts."""
    ordered = sorted(set(cpus))
    if parts < 1 or len(ordered) < parts:
        return None
    base, extra = divmod(len(ordered), parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i >= parts - extra else 0)
        out.append(tuple(ordered[start:start + n]))
        start += n
    return out


def rps_mask(cpus: Iterable[int]) -> str:
    """The hex CPU mask sysfs takes for rps_cpus ("3", "ff,00000000": 32-bit groups)."""
    mask = 0
    for c in cpus:
        mask |= 1 << c
    digits = f"{mask:x}"
    groups: list[str] = []
    while digits:
        groups.insert(0, digits[-8:])
        digits = digits[:-8]
    if not groups:
        return "0"
    return ",".join([groups[0], *(g.rjust(8, "0") for g in groups[1:])])


def confine(argv: list[str], cpus: str) -> list[str]:
    """argv started on `cpus` only (one mechanism on every site: taskset)."""
    return ["taskset", "-c", cpus, *argv]


# ---- the plan of a case ------------------------------------------------------------------
def plan(mode: str, *, local: bool, site_cpus: Mapping[str, str] | None = None,
         available: Iterable[int] | None = None) -> dict[str, Any]:
    """What a case does: {"mode", "on", "cpus": {site: cpulist}, "why" (when off)}.

    `local`: the two-namespace testbed (split the CPUs this process may use); otherwise hosts,
    whose sites use `site_cpus` (from `[sites]`)."""
    if mode == "off":
        return {"mode": "off", "on": False, "cpus": {}}
    if not local:
        given = {n: c for n, c in (site_cpus or {}).items() if c}
        if not given:
            return {"mode": mode, "on": False, "cpus": {},
                    "why": "no site names its cpus in [sites]"}
        return {"mode": mode, "on": True, "cpus": dict(given)}
    have = sorted(os.sched_getaffinity(0) if available is None else available)
    halves = split_cpus(have, 2)
    if halves is None:
        return {"mode": mode, "on": False, "cpus": {},
                "why": f"this host gives tunbench {len(have)} CPU; placement needs 2"}
    return {"mode": mode, "on": True,
            "cpus": {"a": format_cpus(halves[0]), "b": format_cpus(halves[1])}}


def place(tb: Any, mode: str, site_cpus: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Apply the placement of a case to testbed `tb` before any of its processes start:
    processes of each placed site are confined from then on (`Testbed.spawn`), and the
    underlay's receive work goes to the site's CPUs (RPS), undone at teardown. Recorded in
    the testbed's notes (so in the case document)."""
    local = all(not s.remote and s.host is None for s in tb.sites())
    rec = plan(mode, local=local, site_cpus=site_cpus)
    if rec["on"]:
        rec["rps"] = {}
        for site in tb.sites():
            cpus = rec["cpus"].get(site.name)
            if cpus is None:
                continue
            _check_online(site, cpus)
            tb.placement[site.name] = cpus
            if mode == "sites":
                rec["rps"][site.name] = set_rps(tb, site, site.underlay_if, cpus)
        rec["processes"] = tb.placed_processes
    tb.notes["placement"] = rec
    return rec


def _check_online(site: Any, cpus: str) -> None:
    """The CPUs of a site exist on its host (one line naming them otherwise)."""
    r = site.run(["cat", "/sys/devices/system/cpu/online"], check=False, timeout=10)
    if not r.ok:
        return
    missing = set(parse_cpus(cpus)) - set(parse_cpus(r.stdout.strip()))
    if missing:
        raise TunbenchError(f"site {site.name}: cpus {cpus} names CPU "
                            f"{format_cpus(missing)}, which {site.host or 'this host'} does not "
                            f"have (online: {r.stdout.strip()})",
                            f"give cpus within {r.stdout.strip()} in [sites]")


def rx_queues(site: Any, ifname: str) -> list[str]:
    """The rx queue directories of a device on a site (rx-0, rx-1, ...)."""
    r = site.run(["ls", f"/sys/class/net/{ifname}/queues"], timeout=10)
    return sorted((q for q in r.stdout.split() if q.startswith("rx-")),
                  key=lambda q: int(q[3:]))


def read_rps(site: Any, ifname: str) -> dict[str, str]:
    """rps_cpus of each rx queue of a device on a site, as sysfs prints it."""
    out = {}
    for q in rx_queues(site, ifname):
        out[q] = site.run(["cat", _rps_path(ifname, q)], timeout=10).stdout.strip()
    return out


def set_rps(tb: Any, site: Any, ifname: str, cpus: str) -> dict[str, Any]:
    """Steer the receive work of `ifname` on `site` to `cpus` (every rx queue); each old
    value is written back at teardown (a ledger command: `cp` of a file holding it, so no
    shell and no stdin). Returns what was set."""
    mask = rps_mask(parse_cpus(cpus))
    before = read_rps(site, ifname)
    new = tb.write_text(site, f"rps-{site.name}-{ifname}.new", mask + "\n")
    for q, old in before.items():
        path = _rps_path(ifname, q)
        saved = tb.write_text(site, f"rps-{site.name}-{ifname}-{q}.old", old + "\n")
        # recorded first: a signal between the write and the record still restores it
        site.record_command(tb.ledger, ["cp", str(saved), path], gone=("No such file",))
        site.run(["cp", str(new), path], timeout=10)
    return {"dev": ifname, "mask": mask, "before": before}


def _rps_path(ifname: str, queue: str) -> str:
    return str(Path("/sys/class/net") / ifname / "queues" / queue / "rps_cpus")


def allowed_cpus(pid: int) -> str | None:
    """Cpus_allowed_list of a process on this host, None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
