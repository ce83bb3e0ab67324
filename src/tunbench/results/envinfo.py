"""The environment a result was measured in: kernel, CPU, tool versions, offloads."""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

from .. import __version__, proc

VERSION_ARGS: dict[str, list[str]] = {
    "iperf3": ["iperf3", "--version"],
    "ip": ["ip", "-V"],
    "ethtool": ["ethtool", "--version"],
    "sockperf": ["sockperf", "--version"],
    "wireguard-go": ["wireguard-go", "--version"],
    "wg": ["wg", "--version"],
    "ovs-vswitchd": ["ovs-vswitchd", "--version"],
    "ssh": ["ssh", "-V"],
    "sshd": ["sshd", "-V"],
    "tc": ["tc", "-V"],
    "ping": ["ping", "-V"],
    "ss": ["ss", "-V"],
    "swanctl": ["swanctl", "--version"],
}


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
    for tool in tools or list(VERSION_ARGS):
        if not proc.which(tool):
            out[tool] = None
            continue
        try:
            r = proc.run(VERSION_ARGS.get(tool, [tool, "--version"]), timeout=5, check=False)
        except Exception:
            out[tool] = None
            continue
        text = (r.stdout + r.stderr).strip().splitlines()
        out[tool] = text[0].strip() if text else None
    return out


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
