"""What a failed ssh means, in one line with the fix (pure; tested on captured OpenSSH output
in tests/data/ssh and live against real sshd hosts)."""

from __future__ import annotations

import re

from ..errors import CommandFailed, SpecError, TunbenchError, UnavailableError


def host_of(target: str) -> str:
    return target.rsplit("@", 1)[-1]


class ConnectError(UnavailableError):
    """A site cannot be reached or refuses us (exit 3): nothing was changed on it."""


class ConnectionLost(CommandFailed):
    """The connection to a site dropped while a command or the agent was running."""


# ssh's stderr -> one clear line. Patterns match OpenSSH 9.x messages (tests/data/ssh).
_PORT_RE = re.compile(r"port (\d+)")


def classify(stderr: str, target: str, connect_timeout: int = 10) -> TunbenchError:
    """The error a failed ssh connection means, from ssh's stderr (pure; tested on captures)."""
    host = host_of(target)
    port = (_PORT_RE.search(stderr) or [None, "22"])[1]
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "no output")
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        return ConnectError(f"{target}: the host key CHANGED since it was recorded in "
                            "known_hosts (a reinstalled host, or someone in the middle)",
                            "verify the new fingerprint out of band, then remove the old key: "
                            f"ssh-keygen -R {host}")
    if "Host key verification failed" in stderr or "host key is known for" in stderr:
        return ConnectError(f"{target}: the host key is unknown (not in known_hosts); "
                            "tunbench never accepts a key unseen",
                            f"verify the fingerprint out of band, then record it: ssh {host} "
                            f"once, or ssh-keyscan {host} >> ~/.ssh/known_hosts")
    if "Could not resolve hostname" in stderr:
        return SpecError(f"unknown host {host!r}: the name does not resolve",
                         "check the spelling, give an address, or add a Host entry with "
                         "HostName in ~/.ssh/config")
    if "Connection refused" in stderr:
        return ConnectError(f"{target}: connection refused on port {port}",
                            "is sshd running there and listening on that port? "
                            "(systemctl status ssh; Port in ~/.ssh/config)")
    if "timed out" in stderr:
        return ConnectError(f"{target}: connection timed out after {connect_timeout}s",
                            "check the address, the route and firewalls on the way")
    if "No route to host" in stderr or "Network is unreachable" in stderr:
        return ConnectError(f"{target}: no route to host",
                            "check the address and this host's routes to it")
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        return ConnectError(f"{target}: authentication refused ({last.split('(')[-1].rstrip('.)')})",
                            "check the user and the key: ssh-copy-id USER@HOST, IdentityFile in "
                            "~/.ssh/config, or load the key into ssh-agent (no prompts here)")
    return ConnectError(f"{target}: ssh failed: {last}",
                        "try `ssh -v` with the same target to see why")
