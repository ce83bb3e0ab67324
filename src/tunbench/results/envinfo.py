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


# swanctl --version asks a running charon over vici, so without one it prints plugin load
# errors and no version: ask the charon binary (it needs no daemon), else the package.
CHARON_PATHS = ("/usr/lib/ipsec/charon", "/usr/libexec/ipsec/charon",
                "/usr/libexec/strongswan/charon")
PACKAGES = {"swanctl": "strongswan-swanctl"}
_NOISE = re.compile(r"^(plugin '.*' failed to load|.*no plugin file available|error:|"
                    r"connecting to .* failed|.*vici)", re.I)
_VERSIONISH = re.compile(r"\d")


def version_line(text: str) -> str | None:
    """The line of a tool's version output that states a version (pure; tested on captured
    output): noise such as strongSwan's plugin load errors is skipped, and output without
    any version number (an error message) gives None."""
    for line in text.splitlines():
        line = line.strip()
        if line and not _NOISE.match(line) and _VERSIONISH.search(line):
            return line
    return None


def _run_version(argv: list[str]) -> str | None:
    try:
        r = proc.run(argv, timeout=5, check=False)
    except Exception:
        return None
    # most tools print it on stdout; ssh -V and some others on stderr
    return version_line(r.stdout) or version_line(r.stderr)


def _package_version(tool: str) -> str | None:
    pkg = PACKAGES.get(tool)
    if not pkg or not proc.which("dpkg-query"):
        return None
    try:
        r = proc.run(["dpkg-query", "-W", "-f=${Version}", pkg], timeout=5, check=False)
    except Exception:
        return None
    return f"{pkg} {r.stdout.strip()} (package)" if r.ok and r.stdout.strip() else None


def tool_version(tool: str, argvs: dict[str, list[str]] | None = None) -> str | None:
    """The version a tool states, by its full path (some live outside PATH:
    /usr/lib/ipsec/charon); its package's version when the tool cannot say; None when the
    tool is not installed."""
    path = proc.which(tool)
    if not path:
        return None
    if tool == "swanctl":
        for charon in CHARON_PATHS:
            if Path(charon).exists():
                found = _run_version([charon, "--version"])
                if found:
                    return found
        return _package_version(tool)
    argv = (argvs if argvs is not None else version_argvs()).get(tool, [tool, "--version"])
    if not argv:
        return f"installed ({path}; no version option)"
    return _run_version([path, *argv[1:]]) or _package_version(tool)


def tool_versions(tools: list[str] | None = None) -> dict[str, str | None]:
    argvs = version_argvs()
    return {tool: tool_version(tool, argvs) for tool in tools or list(argvs)}


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
