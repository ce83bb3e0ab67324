"""Undo of what tbtun leaves on a host: a bpffs mount, pin directories, tc attachments.

One implementation for both places it runs: in tunbench for a local site (the ledger's
"bpffs", "bpfpins" and "tbtun-tc" entries, commands through tunbench.proc), and inside the
agent's zipapp on a remote host (the same entries journaled there, so the agent's EOF undo and
`tunbench cleanup --site` remove them). Standard library only; every command is an argv given
to the caller's `run` (argv -> (returncode, stderr)).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

Run = Callable[[list[str]], tuple[int, str]]
KINDS = ("bpffs", "bpfpins", "tbtun-tc")
BPFFS = "/sys/fs/bpf"
PREFIX = "tb"               # testbed.names.PREFIX (this module runs where tunbench is absent)
TC_PRIO = "0x7b"            # tbtun's filters' priority, so they can be removed on their own
GONE = ("Cannot find device", "No such file", "Invalid handle", "does not exist")


def mounted(mounts: str, path: str) -> bool:
    """Whether /proc/self/mounts text `mounts` has a bpf filesystem on `path`."""
    return any(ln.split()[1:3] == [path, "bpf"] for ln in mounts.splitlines()
               if len(ln.split()) > 2)


def bpffs_mounted(path: str) -> bool:
    """Whether a bpf filesystem is mounted on `path` in this mount namespace."""
    try:
        with open("/proc/self/mounts") as f:
            return mounted(f.read(), path)
    except OSError:
        return False


def undo_bpffs(e: dict[str, Any], run: Run) -> None:
    """Unmount a bpffs we mounted, only once nothing else is pinned in it."""
    path = e["path"]
    if path != BPFFS:
        raise OSError(f"{path}: tunbench mounts bpffs on {BPFFS} only: not unmounted")
    if not bpffs_mounted(path):
        return
    # the kernel's own iterators (maps.debug, progs.debug) appear on every bpffs
    if not [n for n in os.listdir(path) if not n.endswith(".debug")]:
        code, err = run(["umount", path])
        if code:
            raise OSError(f"umount {path}: {err.strip()}")


def undo_pins(e: dict[str, Any], run: Run) -> None:
    """Unpinning drops the last reference of maps and programs no filter uses any more. Only
    a project-prefixed directory in bpffs is ever removed (whatever a journal says)."""
    path = os.path.normpath(e["path"])
    if not path.startswith(f"{BPFFS}/{PREFIX}-") or "/" in path[len(BPFFS) + 1:]:
        raise OSError(f"{path} is not a tunbench pin directory ({BPFFS}/{PREFIX}-<run>): "
                      "not removed")
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(e["path"]):
        raise OSError(f"could not remove {e['path']}")


def tc_argv(netns: str | None, *args: str) -> list[str]:
    """tc in a namespace of this host by nsenter (`tc -n` and `ip netns exec` remount /sys,
    which hides /sys/fs/bpf); plain tc in the root namespace."""
    base = ["tc", *args]
    return ["nsenter", f"--net=/run/netns/{netns}", *base] if netns else base


def ip_argv(netns: str | None, *args: str) -> list[str]:
    base = ["ip", *args]
    return ["nsenter", f"--net=/run/netns/{netns}", *base] if netns else base


def tc_undo_argvs(e: dict[str, Any]) -> list[list[str]]:
    """What removes a "tbtun-tc" entry's attachments: the clsact qdisc when tbtun created it
    (filters go with it), else only our filters (by priority); the XDP program when set."""
    netns, ifname = e.get("netns"), e["name"]
    argvs = ([tc_argv(netns, "qdisc", "del", "dev", ifname, "clsact")] if e.get("qdisc") else
             [tc_argv(netns, "filter", "del", "dev", ifname, hook, "prio", TC_PRIO)
              for hook in (("egress",) if e.get("xdp") else ("egress", "ingress"))])
    if e.get("xdp"):
        argvs.append(ip_argv(netns, "link", "set", "dev", ifname, "xdpdrv", "off"))
    return argvs


def undo_tc(e: dict[str, Any], run: Run) -> None:
    netns = e.get("netns")
    if netns and not os.path.exists(f"/run/netns/{netns}"):
        return          # the namespace, and the filters with it, are gone
    for argv in tc_undo_argvs(e):
        code, err = run(argv)
        if code and not any(s in err for s in GONE):
            raise OSError(f"{' '.join(argv)}: {err.strip()}")


UNDO: dict[str, Callable[[dict[str, Any], Run], None]] = {
    "bpffs": undo_bpffs, "bpfpins": undo_pins, "tbtun-tc": undo_tc}


def undo(e: dict[str, Any], run: Run) -> None:
    UNDO[e["kind"]](e, run)


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two entries name the same object (kind and path, or kind, netns and device)."""
    keys = ("kind", "path") if a.get("path") else ("kind", "netns", "name")
    return all(a.get(k) == b.get(k) for k in keys)
