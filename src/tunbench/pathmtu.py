"""DF probes through a tunnel: the tunnel MTU the driver derived from the underlay MTU and its
overhead, checked on the path itself before a case measures.

Two pings with Don't Fragment set (`ping -M do`) go from site a to site b's inner address:
one whose IP packet is exactly the tunnel MTU (it must pass end to end: the encapsulated
packet then fills the underlay MTU, so this also shows the underlay carries its MTU on both
ends), one a byte larger (it must not: refused at the tunnel device, or answered with
"fragmentation needed"). The result is recorded per case as `path_mtu`; a probe that does not
behave so is a case note, not a failure, since the measurement itself may still be sound.
"""

from __future__ import annotations

from typing import Any

from .errors import CommandFailed
from .testbed.base import Site

ICMP_ECHO_HEADERS = {4: 20 + 8, 6: 40 + 8}   # IP + ICMP echo header: ping -s adds these
AT_MTU_TRIES = 3                              # the full-size probe, lost once, is retried


def probe_argv(addr: str, family: int, packet: int) -> list[str]:
    """One DF echo request whose IP packet is `packet` bytes long."""
    return ["ping", f"-{family}", "-c", "1", "-W", "1", "-n", "-M", "do",
            "-s", str(packet - ICMP_ECHO_HEADERS[family]), addr]


def refusal(text: str) -> str:
    """The line of a failed DF ping's output that says why (pure): ping's own words, e.g.
    "ping: local error: message too long, mtu=1450" (the sender's device refused it) or
    "From 10.0.0.1 icmp_seq=1 Frag needed and DF set (mtu = 1400)" (a router on the path);
    else its last line (a timeout: the summary)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for word in ("mtu", "error"):   # not the summary's "+1 errors" when a reason is there
        found = [ln for ln in lines if word in ln.lower() and "packets transmitted" not in ln]
        if found:
            return found[0]
    return lines[-1] if lines else "no output"


def _ping(site: Site, addr: str, family: int, packet: int, tries: int) -> dict[str, Any]:
    reply = ""
    for _ in range(tries):
        try:
            r = site.run(probe_argv(addr, family, packet), check=False, timeout=5)
        except CommandFailed as exc:   # a probe never fails the case: it is recorded
            reply = exc.one_line()
            continue
        if r.ok:
            return {"size": packet, "passed": True}
        reply = refusal(r.stdout + r.stderr)
    return {"size": packet, "passed": False, "reply": reply}


def probe(site: Site, addr: str, family: int, mtu: int) -> dict[str, Any]:
    """Both DF probes from `site` to `addr` (the far inner address) for a tunnel MTU `mtu`:
    {family, mtu, at_mtu: {size, passed}, above_mtu: {size, passed, reply?}, verified}."""
    at = _ping(site, addr, family, mtu, AT_MTU_TRIES)
    above = _ping(site, addr, family, mtu + 1, 1)
    return {"family": family, "mtu": mtu, "at_mtu": at, "above_mtu": above,
            "verified": at["passed"] and not above["passed"]}


def note(result: dict[str, Any]) -> str | None:
    """The case note of a probe that did not confirm the tunnel MTU (None when it did)."""
    mtu, at, above = result["mtu"], result["at_mtu"], result["above_mtu"]
    if not at["passed"]:
        return (f"a DF packet of the tunnel MTU ({mtu} B) did not pass through the tunnel "
                f"({at.get('reply', '')}): the path carries less than the underlay MTU minus "
                "the tunnel overhead; TCP relies on path MTU discovery here")
    if above["passed"]:
        return (f"a DF packet of {mtu + 1} B passed through the tunnel: the path carries more "
                f"than the tunnel MTU recorded ({mtu} B)")
    return None
