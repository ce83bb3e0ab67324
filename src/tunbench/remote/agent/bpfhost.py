"""Undo of what tbtun leaves on a host: a bpffs mount, pin directories, tc attachments; and
tcx attachment (bpf links), which no Debian 12 tool can make.

One implementation for both places it runs: in tunbench for a local site (the ledger's
"bpffs", "bpfpins" and "tbtun-tc" entries, commands through tunbench.proc), and inside the
agent's zipapp on a remote host (the same entries journaled there, so the agent's EOF undo and
`tunbench cleanup --site` remove them). Standard library only; every command is an argv given
to the caller's `run` (argv -> (returncode, stderr)).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from . import bpfsys

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
    (filters go with it), else only our filters (by priority); the XDP program when set.
    Programs attached by tcx have no tc filter (their links go in undo_tcx)."""
    netns, ifname = e.get("netns"), e["name"]
    if e.get("tcx"):
        return ([ip_argv(netns, "link", "set", "dev", ifname, "xdpdrv", "off")]
                if e.get("xdp") else [])
    argvs = ([tc_argv(netns, "qdisc", "del", "dev", ifname, "clsact")] if e.get("qdisc") else
             [tc_argv(netns, "filter", "del", "dev", ifname, hook, "prio", TC_PRIO)
              for hook in (("egress",) if e.get("xdp") else ("egress", "ingress"))])
    if e.get("xdp"):
        argvs.append(ip_argv(netns, "link", "set", "dev", ifname, "xdpdrv", "off"))
    return argvs


def undo_tc(e: dict[str, Any], run: Run) -> None:
    undo_tcx(e, run)
    netns = e.get("netns")
    if netns and not os.path.exists(f"/run/netns/{netns}"):
        return          # the namespace, and the filters with it, are gone
    for argv in tc_undo_argvs(e):
        code, err = run(argv)
        if code and not any(s in err for s in GONE):
            raise OSError(f"{' '.join(argv)}: {err.strip()}")


# -- tcx (Linux >= 6.6): tc programs attached as bpf links, with no clsact qdisc and no
# classifier layer (tcx_run instead of tcf_classify/cls_bpf). Debian 12's tc and bpftool 7.1
# cannot attach them and its libbpf 1.1 has no API for them, so the three bpf(2) commands it
# takes are made here (standard library: ctypes). A link is pinned in the site's pin
# directory: removing the pin (or the device) detaches it.
BPF_OBJ_PIN, BPF_OBJ_GET, BPF_PROG_QUERY, BPF_LINK_CREATE = 6, 7, 16, 28
TCX = {"ingress": 46, "egress": 47}          # enum bpf_attach_type: BPF_TCX_INGRESS/EGRESS
CLONE_NEWNET = 0x40000000
TCX_MIN_KERNEL = (6, 6)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    """bpf(cmd, attr): the result, or OSError with the kernel's errno."""
    return bpfsys.bpf(cmd, attr)


def _attr(data: bytes) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, 128)    # the kernel wants the tail zeroed


def _obj_get(path: str) -> int:
    name = ctypes.create_string_buffer(path.encode())
    return _bpf(BPF_OBJ_GET, _attr(struct.pack("=QII", ctypes.addressof(name), 0, 0)))


def in_netns(netns: str | None, fn: Callable[[], Any]) -> Any:
    """fn() in network namespace `netns` (None: this one), on a thread of its own: setns
    moves only the calling thread, and device names resolve in the namespace."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            if netns:
                with open(f"/run/netns/{netns}") as f:
                    libc = ctypes.CDLL(None, use_errno=True)
                    if libc.setns(f.fileno(), CLONE_NEWNET):
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns {netns}: {os.strerror(err)}")
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            out["error"] = exc

    t = threading.Thread(target=body, name="tb-netns")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def tcx_attach(netns: str | None, ifname: str, hook: str, prog_pin: str, link_pin: str
               ) -> None:
    """Attach the pinned tc program `prog_pin` to `ifname`'s tcx `hook` (ingress|egress),
    after any programs already there, and pin the link at `link_pin` (which must lie in a
    project pin directory). OSError(EINVAL) on a kernel without tcx."""
    _own_pin(link_pin)

    def attach() -> None:
        prog = _obj_get(prog_pin)
        try:
            link = _bpf(BPF_LINK_CREATE, _attr(struct.pack(
                "=IIII", prog, socket.if_nametoindex(ifname), TCX[hook], 0)))
            try:
                name = ctypes.create_string_buffer(link_pin.encode())
                _bpf(BPF_OBJ_PIN, _attr(struct.pack("=QII", ctypes.addressof(name), link, 0)))
            finally:
                os.close(link)
        finally:
            os.close(prog)
    in_netns(netns, attach)


def tcx_prog_ids(netns: str | None, ifname: str, hook: str) -> list[int]:
    """IDs of the programs on `ifname`'s tcx `hook`, in order ([] on a kernel without tcx
    or a device that is gone)."""
    def query() -> list[int]:
        ids = (ctypes.c_uint32 * 64)()
        attr = _attr(struct.pack("=IIIIQI", socket.if_nametoindex(ifname), TCX[hook], 0, 0,
                                 ctypes.addressof(ids), len(ids)))
        _bpf(BPF_PROG_QUERY, attr)
        count = struct.unpack_from("=I", attr.raw, 24)[0]
        return [int(ids[i]) for i in range(min(count, len(ids)))]
    try:
        return list(in_netns(netns, query))
    except OSError:
        return []


def _own_pin(path: str) -> None:
    norm = os.path.normpath(path)
    if not norm.startswith(f"{BPFFS}/{PREFIX}-"):
        raise OSError(f"{path} is not in a tunbench pin directory ({BPFFS}/{PREFIX}-<run>)")


def undo_tcx(e: dict[str, Any], run: Run) -> None:
    """Unpinning a tcx link (the last reference to it) detaches its program."""
    for path in e.get("links", []):
        _own_pin(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


UNDO: dict[str, Callable[[dict[str, Any], Run], None]] = {
    "bpffs": undo_bpffs, "bpfpins": undo_pins, "tbtun-tc": undo_tc}


def undo(e: dict[str, Any], run: Run) -> None:
    UNDO[e["kind"]](e, run)


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two entries name the same object (kind and path, or kind, netns and device)."""
    keys = ("kind", "path") if a.get("path") else ("kind", "netns", "name")
    return all(a.get(k) == b.get(k) for k in keys)
