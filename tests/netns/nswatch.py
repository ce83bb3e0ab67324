"""A watcher for live campaign tests: every 100 ms while a campaign runs, each namespace of
ours that the campaign created (not there when the watcher started) is handed to `probe(ns,
run id, site)`, which a test's subclass overrides to read what it needs (the processes of the
site and their CPUs and cgroups, the qdiscs, the rps_cpus). Used by test_cpus_per_site_live,
test_placement_live and test_rate_axis_live; with it, the readers of a process in /proc those
tests share.

A probe that raises stops the watcher; the error is raised again when the `with` block ends
(a watcher that silently stopped would leave a test asserting on what it saw before)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Self

from tunbench import proc
from tunbench.testbed import names, netlink

PF_EXITING = 0x4   # include/linux/sched.h: set as do_exit() begins, before cgroup_exit()


class NamespaceWatcher:
    """Calls `probe` for each new namespace of ours every `interval` s while entered."""

    def __init__(self, interval: float = 0.1) -> None:
        self.before = set(netlink.list_netns())
        self.interval = interval
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def probe(self, ns: str, rid: str, site: str) -> None:
        """Read what the test needs of namespace `ns` (site `site` of run `rid`)."""
        raise NotImplementedError

    def _loop(self) -> None:
        try:
            while not self.stop.wait(self.interval):
                for ns in sorted(set(netlink.list_netns()) - self.before):
                    if not names.is_ours_netns(ns):
                        continue
                    _, rid, site = ns.split("-")
                    self.probe(ns, rid, site)
        except BaseException as exc:   # kept, raised at __exit__
            self.error = exc

    def left(self) -> list[str]:
        """Namespaces of ours that appeared while watching and are still there."""
        return [n for n in netlink.list_netns() if n not in self.before and names.is_ours_netns(n)]

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        if self.error is not None and exc_type is None:
            raise AssertionError(f"the namespace watcher stopped: {self.error!r}") \
                from self.error


# ---- a process, read from /proc -----------------------------------------------------------
def pids(ns: str) -> list[int]:
    """The processes in namespace `ns` (`ip netns pids`)."""
    r = proc.run(["ip", "netns", "pids", ns], check=False, timeout=10)
    return [int(p) for p in r.stdout.split()]


def comm(pid: int) -> str:
    """The process's comm ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cpuset_of(pid: int) -> str | None:
    """The cpuset cgroup path of a process (v1 line, else the v2 one)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = [ln.split(":", 2)[2] for ln in lines if "cpuset" in ln.split(":", 2)[1].split(",")]
    if v1:
        return v1[0]
    v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
    return v2[0] if v2 else None


def state(pid: int | str) -> str:
    """The process's state letter, "X" while it exits: on the v1 hierarchy cgroup_exit() moves
    an exiting task to the root cgroup before it is a zombie (seen in a flake-finder run: an
    iperf3 client ending its case read as "/" with its cmdline already gone). PF_EXITING is set
    before that move, so reading the flags after the cgroup tells the two apart exactly."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    if len(fields) > 6 and int(fields[6]) & PF_EXITING:
        return "X"
    return fields[0]


def parent(pid: int | str) -> str:
    """'PPID cmdline' of the process's parent ('' when gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = stat.rsplit(")", 1)[1].split()[1]
        return f"{ppid} {cmdline(ppid)[:80]}"
    except (OSError, IndexError):
        return ""
