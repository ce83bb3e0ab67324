"""What this host can do: kernel features, tools, privilege. Read-only; changes nothing.

Tunnel drivers and workloads state their requirements as a list of `Missing` records, so
`tunbench list` / `doctor` can explain exactly what is absent and how to fix it, and a run can
refuse before anything on the system is touched.

The same questions can be asked of another host: inside `viewing(view)`, kernel_missing and
tool_missing answer from `view` (a remote site's kernel configuration and PATH, read by its
agent), so a driver's `resolve_impl` and `requirements` judge that host without knowing it.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import os
import platform
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import proc


@dataclass(frozen=True)
class Missing:
    what: str   # e.g. "kernel CONFIG_GENEVE", "tool wg"
    why: str    # what it is needed for / what was found
    fix: str    # what the user can do

    def one_line(self) -> str:
        return f"{self.what}: {self.why} ({self.fix})"


TUN_NODE = Path("/dev/net/tun")


def tun_device_missing(who: str) -> Missing | None:
    """None when this host has the TUN device node that `who` (a userspace datapath: tbagg,
    wireguard-go, libipsec, OVS netdev ports) opens; else why not and the fix."""
    if TUN_NODE.exists():
        return None
    return Missing(f"device {TUN_NODE}", f"{who} needs TUN",
                   "use a kernel with CONFIG_TUN, or mknod /dev/net/tun c 10 200")


class HostView(Protocol):
    """Another host, as capability checks see it."""

    where: str       # "site b (root@gw2)"
    release: str     # its kernel release

    def kernel_config(self) -> dict[str, str] | None: ...

    def has_tool(self, tool: str) -> bool: ...


_VIEW: ContextVar[HostView | None] = ContextVar("tunbench_host_view", default=None)


@contextlib.contextmanager
def viewing(view: HostView | None) -> Iterator[None]:
    """Answer capability questions from `view` (None: this host) inside the block."""
    token = _VIEW.set(view)
    try:
        yield
    finally:
        _VIEW.reset(token)


def _view_kernel_missing(view: HostView, option: str, feature: str) -> Missing | None:
    """On another host: y or m counts (its modules are loaded on demand there); a
    configuration that cannot be read is not judged (as the site checks do)."""
    conf = view.kernel_config()
    if conf is None or conf.get(option) in ("y", "m"):
        return None
    return Missing(f"kernel {option}", f"{feature} is not in the kernel of {view.where} "
                   f"({view.release})", "use a kernel built with it on that host")


@functools.lru_cache(maxsize=1)
def kernel_config() -> dict[str, str] | None:
    """The running kernel's build configuration, or None when it cannot be read."""
    release = platform.release()
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{release}")):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except OSError:
            continue
        conf: dict[str, str] = {}
        for line in raw.decode(errors="replace").splitlines():
            if line.startswith("CONFIG_") and "=" in line:
                key, _, val = line.partition("=")
                conf[key] = val
        return conf
    return None


def _module_file_exists(module: str) -> bool:
    base = Path("/lib/modules") / platform.release()
    dep = base / "modules.dep"
    try:
        text = dep.read_text()
    except OSError:
        return False
    names = {module, module.replace("_", "-")}
    for line in text.splitlines():
        name = line.split(":", 1)[0].rsplit("/", 1)[-1].split(".ko", 1)[0]
        if name in names:
            return True
    return False


def _modules_loadable() -> bool:
    try:
        return Path("/proc/sys/kernel/modules_disabled").read_text().strip() == "0"
    except OSError:
        return False


def kernel_missing(option: str, feature: str, module: str | None = None) -> Missing | None:
    """None if the kernel has `option` built in (or as a loadable module present on disk)."""
    view = _VIEW.get()
    if view is not None:
        return _view_kernel_missing(view, option, feature)
    conf = kernel_config()
    if conf is None:
        # Unknown configuration: trust a module on disk or a module already loaded.
        if module and (Path("/sys/module") / module).exists():
            return None
        if module and _module_file_exists(module) and _modules_loadable():
            return None
        return Missing(f"kernel {option}", f"{feature}: cannot read the kernel configuration "
                       "(/proc/config.gz, /boot/config-*)", "use a kernel with this feature")
    val = conf.get(option)
    if val == "y":
        return None
    if val == "m":
        if module and (Path("/sys/module") / module).exists():
            return None
        if module and _module_file_exists(module) and _modules_loadable():
            return None
        return Missing(f"kernel {option}", f"{feature} is a module that cannot be loaded here",
                       f"modprobe {module or option.lower()} or install the kernel's modules")
    return Missing(f"kernel {option}", f"{feature} is not in this kernel ({platform.release()})",
                   "use a kernel built with it (e.g. Debian's linux-image-amd64), "
                   "or prove it in the VM lab: make vmlab-test")


def tool_missing(tool: str, purpose: str = "") -> Missing | None:
    view = _VIEW.get()
    if view.has_tool(tool) if view is not None else proc.which(tool):
        return None
    pkg = proc.package_for(tool)
    return Missing(f"tool {tool}", f"not installed{': ' + purpose if purpose else ''}",
                   f"apt-get install {pkg}")


def root_missing() -> Missing | None:
    if os.geteuid() == 0:
        return None
    return Missing("root", "creating namespaces and links needs root (CAP_NET_ADMIN)",
                   "run as root, e.g. sudo tunbench ...")


CONGESTION_RE = re.compile(r"^[a-z0-9_]{1,15}$")   # TCP_CA_NAME_MAX is 16 with the NUL
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def congestion_problems(name: str) -> list[str]:
    """A TCP congestion control name (iperf3 -C) is lowercase letters, digits and _."""
    if name and not CONGESTION_RE.match(name):
        return [f"congestion {name!r} is not a TCP congestion control name (e.g. cubic, bbr, "
                "reno; empty: the system default)"]
    return []


def congestion_missing(name: str) -> Missing | None:
    """None if the kernel offers congestion control `name` (or `name` is empty)."""
    if not name:
        return None
    try:
        offered = AVAILABLE_CC.read_text().split()
    except OSError:
        return None   # cannot tell: the run will say if iperf3 refuses it
    if name in offered:
        return None
    return Missing(f"congestion control {name}", f"not offered by this kernel (offered: "
                   f"{', '.join(offered)})", f"modprobe tcp_{name}, or use one of those")
