"""Site size in cores: each site of a case confined to k CPUs by a cpuset cgroup.

`[experiment] cpus_per_site = [1, 2]` (`--cpus-per-site 1,2`) is an axis like `mtus`: each
value is a scenario measured for every method in the same round (plan.py), and a case at k
confines each site to k CPUs:

- **which CPUs: one layout per campaign.** The CPUs tunbench may use (its affinity, within
  its cpuset) in order. The layout is decided once from the whole axis (`layout`): when two
  sites of the largest count fit apart (2 max(axis) <= n) the sites are **apart** at every
  count (site a the lowest k, site b the next k); when they do not, they are **shared** at
  every count (both the same lowest k). So the axis changes each site's capacity, never the
  layout with it: on a 2-core host the axis 1, 2 is shared (k = 1: both sites on CPU 0;
  k = 2: both on CPUs 0-1), where apart at 1 and shared at 2 would give the host's two CPUs
  to the sites at both counts (`site_sets`).
- **processes.** One cpuset cgroup per site, `tb-<run id>-<site>`, made under the cpuset
  cgroup tunbench itself runs in: cgroup v2 where the unified hierarchy has the cpuset
  controller enabled, else the v1 cpuset hierarchy. Every process the site starts through
  `Testbed.spawn` (the workload's ends, the tunnel's daemons) joins it before its first
  instruction (testbed/cgjoin.py, then exec), so its threads and children are in it too, and
  the kernel keeps their affinity within the set (`Cpus_allowed_list`).
- **receive work.** The site's underlay receive path is steered to the same CPUs by RPS
  (placement.set_rps, undone at teardown), unless `placement = "processes"` asks for the
  processes only.
- **recorded and undone.** The case's testbed records `cpus_per_site` and `cores` (the
  mechanism, the layout and why, each site's CPUs and cgroup path, the RPS set, the processes started in each
  cgroup). Each cgroup is in the ledger the moment it exists and removed at teardown after
  the site's processes (rmdir; anything still in it is a descendant of a process we started
  and is stopped first); `tunbench cleanup` sweeps those of crashed runs by name.

Not confined: short commands a driver runs to configure a site (`ip`, `ethtool`, `ping`
probes through `site.run`), tunbench itself and its CPU sampler, and kernel work not tied to
the site's tasks or its underlay's receive queue (the kernel's own per-CPU threads: kworkers of
kernel crypto, e.g. kernel WireGuard's encryption workers, and ksoftirqd of a CPU outside the
set when it was raised there). See docs/methodology.md ("Site size in cores").
"""

from __future__ import annotations

import errno
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import TunbenchError, UnavailableError
from . import names, placement
from .ledger import owner_alive, register_undo

KEY = "cpus_per_site"
MOUNTINFO = Path("/proc/self/mountinfo")
SELF_CGROUP = Path("/proc/self/cgroup")
_NAME_RE = re.compile(rf"^{names.PREFIX}-([0-9a-f]{{{names.RUN_ID_LEN}}})-[a-z0-9]+$")


# ---- the axis ----------------------------------------------------------------------------
def host_cpus() -> tuple[int, ...]:
    """The CPUs this process may use, sorted."""
    return tuple(sorted(os.sched_getaffinity(0)))


def parse_axis(raw: Any, spot: str, have: int, problems: list[str]) -> tuple[int, ...]:
    """The values of `cpus_per_site` (a list of core counts, each 1..have, none twice)."""
    if not isinstance(raw, list) or not raw:
        problems.append(f"{spot} must be a non-empty list of core counts like [1, 2]")
        return ()
    out: list[int] = []
    for k in raw:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            problems.append(f"{spot}: {k!r} is not a number of cores (1 or more)")
        elif k > have:
            problems.append(f"{spot}: {k} cores per site, but this host gives tunbench {have} "
                            f"CPU{'s' if have != 1 else ''} (give 1 to {have})")
        elif k in out:
            problems.append(f"{spot}: {k} is listed twice")
        else:
            out.append(k)
    return tuple(out)


APART, SHARED = "apart", "shared"
LAYOUTS = (APART, SHARED)


def layout(axis: Iterable[int], n: int) -> str:
    """The campaign's one layout on n CPUs: "apart" when two sites of the axis's largest
    count get CPUs of their own (2 max <= n), else "shared" (both sites on the same CPUs at
    every count, so the axis varies capacity only)."""
    counts = list(axis)
    if not counts:
        raise ValueError("an empty cpus_per_site axis has no layout")
    return APART if 2 * max(counts) <= n else SHARED


def layout_reason(lay: str, axis: Iterable[int], n: int) -> str:
    """Why the campaign has that layout, in one clause (plan text, report, record)."""
    top = max(axis)
    if lay == APART:
        return (f"2 x {top} cores per site fit in the {n} CPU{'s' if n != 1 else ''} "
                f"available: each site on CPUs of its own at every count")
    return (f"2 x {top} cores per site do not fit in the {n} CPU{'s' if n != 1 else ''} "
            f"available: both sites on the same lowest k CPUs at every count, so the axis "
            f"changes capacity, not layout")


def site_sets(k: int, available: Iterable[int], lay: str) -> dict[str, str]:
    """The cpulist of site a and site b at k cores per site in layout `lay` ("apart": a
    the lowest k, b the next k; "shared": both the same lowest k)."""
    cpus = sorted(set(available))
    if lay not in LAYOUTS:
        raise ValueError(f"layout {lay!r} is not one of {LAYOUTS}")
    if k < 1 or k > len(cpus):
        raise ValueError(f"{k} cores per site, but only {len(cpus)} CPUs are available")
    if lay == APART and 2 * k > len(cpus):
        raise ValueError(f"two sites of {k} cores apart need {2 * k} CPUs, "
                         f"only {len(cpus)} are available")
    a = cpus[:k]
    b = cpus[k:2 * k] if lay == APART else a
    return {"a": placement.format_cpus(a), "b": placement.format_cpus(b)}


# ---- the cgroup hierarchy ------------------------------------------------------------------
@dataclass(frozen=True)
class Hierarchy:
    version: int      # 2 (unified, cpuset enabled) or 1 (the v1 cpuset hierarchy)
    mount: Path       # where it is mounted
    parent: Path      # the cgroup tunbench runs in, where the site cgroups are made

    @property
    def mechanism(self) -> str:
        return f"cgroup v{self.version} cpuset"

    def effective_cpus(self) -> tuple[int, ...]:
        for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
            f = self.parent / name
            if f.exists():
                text = f.read_text().strip()
                if text:
                    return placement.parse_cpus(text)
        return host_cpus()


def parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of each line of /proc/PID/mountinfo."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        out.append((point, rest[0], rest[2]))
    return out


def own_cgroup(text: str, version: int) -> str:
    """The path of this process's cgroup in the v2 hierarchy, or in v1's cpuset one, from
    /proc/self/cgroup ("/" when not listed)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        num, ctrls, path = parts
        if version == 2 and num == "0" and ctrls == "":
            return path or "/"
        if version == 1 and "cpuset" in ctrls.split(","):
            return path or "/"
    return "/"


def find_hierarchy(mountinfo: str | None = None, self_cgroup: str | None = None
                   ) -> Hierarchy | None:
    """The cpuset hierarchy to use here: v2 where its cpuset controller is enabled for the
    cgroup tunbench runs in, else v1's cpuset hierarchy; None when neither is there."""
    mi = mountinfo if mountinfo is not None else MOUNTINFO.read_text()
    sc = self_cgroup if self_cgroup is not None else SELF_CGROUP.read_text()
    mounts = parse_mountinfo(mi)
    for point, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        parent = Path(point) / own_cgroup(sc, 2).lstrip("/")
        try:
            ctrl = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if "cpuset" in ctrl:
            return Hierarchy(2, Path(point), parent)
    for point, fstype, opts in mounts:
        if fstype == "cgroup" and "cpuset" in opts.split(","):
            parent = Path(point) / own_cgroup(sc, 1).lstrip("/")
            if parent.is_dir():
                return Hierarchy(1, Path(point), parent)
    return None


def missing() -> str | None:
    """Why site size in cores cannot run here (one line), or None."""
    try:
        hier = find_hierarchy()
    except OSError as exc:
        return f"cpus_per_site: cannot read the cgroup mounts ({exc})"
    if hier is None:
        return ("cpus_per_site: no cpuset cgroup here (neither cgroup v2 with the cpuset "
                "controller enabled nor a v1 cpuset hierarchy is mounted)")
    if not os.access(hier.parent, os.W_OK):
        return f"cpus_per_site: cannot make cgroups in {hier.parent} (run as root)"
    return None


def cgroup_name(run_id: str, site: str) -> str:
    return f"{names.PREFIX}-{run_id}-{site}"


def create(ledger: Any, hier: Hierarchy, run_id: str, site: str, cpus: str) -> Path:
    """The site's cpuset cgroup on `cpus`, in the ledger from the moment it exists."""
    path = hier.parent / cgroup_name(run_id, site)
    path.mkdir()
    ledger.add("cgroup", path=str(path))
    if hier.version == 1:   # a v1 cpuset takes no task before its mems are set
        mems = _first(hier.parent, ("cpuset.effective_mems", "cpuset.mems")) or "0"
        (path / "cpuset.mems").write_text(mems + "\n")
    (path / "cpuset.cpus").write_text(cpus + "\n")
    return path


def _first(d: Path, files: tuple[str, ...]) -> str:
    for name in files:
        try:
            text = (d / name).read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return ""


def tasks(path: Path) -> list[int]:
    """PIDs of the processes in a cgroup (empty once it is gone)."""
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def remove(path: Path, wait: float = 5.0) -> None:
    """rmdir a site cgroup; what is still in it (a descendant of a process we started: a
    cgroup is only joined through cgjoin) is stopped first. Gone already: nothing to do."""
    deadline = time.monotonic() + wait
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        for pid in tasks(path):
            if pid != os.getpid():
                proc.kill_pid(pid, grace=1.0)
        time.sleep(0.05)


@register_undo("cgroup")
def _undo_cgroup(e: dict[str, Any]) -> None:
    remove(Path(e["path"]))


def sweep(run_id: str | None = None) -> list[str]:
    """Remove site cgroups of crashed runs (of `run_id` only when given)."""
    try:
        hier = find_hierarchy()
    except OSError:
        return []
    if hier is None or not hier.parent.is_dir():
        return []
    removed = []
    for d in sorted(hier.parent.iterdir()):
        m = _NAME_RE.match(d.name)
        if not m or not d.is_dir():
            continue
        rid = m.group(1)
        if (run_id is None and owner_alive(rid)) or (run_id is not None and rid != run_id):
            continue
        try:
            remove(d)
            removed.append(f"cgroup {d}")
        except OSError:
            continue
    return removed


def join_argv(cgroup: Path, argv: list[str]) -> list[str]:
    """argv that joins `cgroup` before it runs (cgjoin.py, then exec). The cgroup.procs path
    goes through this process's root: `ip netns exec` remounts /sys for the program."""
    procs = f"/proc/{os.getpid()}/root{cgroup / 'cgroup.procs'}"
    return [sys.executable, "-S", str(Path(__file__).with_name("cgjoin.py")), procs, "--",
            *argv]


# ---- a case ------------------------------------------------------------------------------
def place(tb: Any, cpus_per_site: int, mode: str,
          site_cpus: Mapping[str, str] | None = None,
          axis: Iterable[int] = ()) -> dict[str, Any]:
    """Confine testbed `tb`'s sites for a case before any of their processes start: at
    `cpus_per_site` k (0: not on the axis, the plain per-site placement of placement.py),
    in the layout the campaign's whole `axis` gives (`layout`; k alone when not given)."""
    if not cpus_per_site:
        return placement.place(tb, mode, site_cpus)
    if any(s.remote or s.host is not None for s in tb.sites()):
        raise TunbenchError("cpus_per_site runs on the local testbed only",
                            "leave out [sites] or cpus_per_site")
    hier = find_hierarchy()
    if hier is None:
        raise UnavailableError(missing() or "no cpuset cgroup", "nothing was changed")
    avail = sorted(set(hier.effective_cpus()) & set(host_cpus()))
    counts = list(axis) or [cpus_per_site]
    lay = layout(counts, len(avail))
    sets = site_sets(cpus_per_site, avail, lay)
    rec: dict[str, Any] = {
        KEY: cpus_per_site, "mechanism": hier.mechanism, "available": placement.format_cpus(avail),
        "layout": lay, "layout_reason": layout_reason(lay, counts, len(avail)),
        "axis": counts, "apart": lay == APART, "cpus": sets, "cgroups": {},
        "rps": {}, "steering": "processes only" if mode == "processes" else "rps",
        "processes": tb.cgroup_processes}
    for site in tb.sites():
        path = create(tb.ledger, hier, tb.run_id, site.name, sets[site.name])
        tb.cgroups[site.name] = path
        rec["cgroups"][site.name] = str(path)
        if mode != "processes":
            rec["rps"][site.name] = placement.set_rps(tb, site, site.underlay_if,
                                                      sets[site.name])
    tb.notes[KEY] = cpus_per_site
    tb.notes["cores"] = rec
    return rec
