"""The environment a result was measured in: kernel, CPU, tool versions, offloads."""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

from .. import __version__, proc

# Tools of the testbed and the workloads; the tunnel drivers' tools come from their
# declarations (tunnels.declared_tools: argv and version arguments), see version_argvs().
VERSION_ARGS: dict[str, list[str]] = {
    "iperf3": ["iperf3", "--version"],
    "ip": ["ip", "-V"],
    "ethtool": ["ethtool", "--version"],
    "sockperf": ["sockperf", "--version"],
    "tc": ["tc", "-V"],
    "ping": ["ping", "-V"],
    "ss": ["ss", "-V"],
}


def version_argvs() -> dict[str, list[str]]:
    """tool -> argv printing its version: the base tools, then every tool a tunnel driver
    declares (an empty argv: the tool has no version option, only its presence is told)."""
    from ..tunnels import declared_tools  # the registry imports this package's siblings
    out = dict(VERSION_ARGS)
    for name, tool in declared_tools().items():
        if name not in out:
            out[name] = [name, *tool.version_argv] if tool.version_argv else []
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tool_versions(tools: list[str] | None = None) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    argvs = version_argvs()
    for tool in tools or list(argvs):
        path = proc.which(tool)
        if not path:
            out[tool] = None
            continue
        argv = argvs.get(tool, [tool, "--version"])
        if not argv:
            out[tool] = f"installed ({path}; no version option)"
            continue
        try:   # by full path: some live outside PATH (/usr/lib/ipsec/charon)
            r = proc.run([path, *argv[1:]], timeout=5, check=False)
        except Exception:
            out[tool] = None
            continue
        out[tool] = version_line(r.stdout + r.stderr)
    return out


_VERSION = re.compile(r"\d+\.\d+")


def version_line(text: str) -> str | None:
    """The line of a tool's version output that carries a version number (swanctl prints
    plugin warnings first), else its first line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return next((ln for ln in lines if _VERSION.search(ln)), lines[0] if lines else None)


def host_env() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "tunbench": __version__,
        "tools": tool_versions(),
    }


_FEATURE = re.compile(r"^\s*([\w-]+):\s+(on|off)(\s+\[fixed\])?", re.M)


def parse_ethtool_k(text: str) -> dict[str, str]:
    """`ethtool -k IFNAME` output -> {feature: 'on'|'off'|'on [fixed]'|...}."""
    return {m.group(1): m.group(2) + (" [fixed]" if m.group(3) else "")
            for m in _FEATURE.finditer(text)}


def offloads(netns: str | None, ifname: str) -> dict[str, str]:
    r = proc.run(["ethtool", "-k", ifname], netns=netns, timeout=10, check=False)
    return parse_ethtool_k(r.stdout) if r.ok else {}
