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

import re
from typing import Any

from .errors import CommandFailed
from .testbed.base import Site

ICMP_ECHO_HEADERS = {4: 20 + 8, 6: 40 + 8}   # IP + ICMP echo header: ping -s adds these
AT_MTU_TRIES = 3                              # the full-size probe, lost once, is retried


WAIT_S = 1.0          # how long a probe waits for its reply (ping -W)
# The probe a byte above the MTU waits only a few times the full-size probe's RTT: ping
# waits its whole -W even after the kernel refused the packet ("message too long"), which
# cost every case a second (the live tier grew by minutes); a reply to a packet that did go
# through comes within an RTT, on a WAN too.
ABOVE_WAIT_RTTS = 5
ABOVE_WAIT_MIN_S = 0.05
_TIME = re.compile(r"time=([\d.]+) ms")


def probe_argv(addr: str, family: int, packet: int, wait: float = WAIT_S) -> list[str]:
    """One DF echo request whose IP packet is `packet` bytes long, waiting `wait` s."""
    return ["ping", f"-{family}", "-c", "1", "-W", f"{wait:g}", "-n", "-M", "do",
            "-s", str(packet - ICMP_ECHO_HEADERS[family]), addr]


def above_wait(rtt_ms: float | None) -> float:
    """The wait of the probe above the MTU: ABOVE_WAIT_RTTS times the full-size probe's RTT
    (at least ABOVE_WAIT_MIN_S, at most WAIT_S); WAIT_S without one."""
    if rtt_ms is None:
        return WAIT_S
    return min(WAIT_S, max(ABOVE_WAIT_MIN_S, ABOVE_WAIT_RTTS * rtt_ms / 1000.0))


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


def _ping(site: Site, addr: str, family: int, packet: int, tries: int,
          wait: float = WAIT_S) -> dict[str, Any]:
    reply = ""
    for _ in range(tries):
        try:
            r = site.run(probe_argv(addr, family, packet, wait), check=False, timeout=5)
        except CommandFailed as exc:   # a probe never fails the case: it is recorded
            reply = exc.one_line()
            continue
        if r.ok:
            m = _TIME.search(r.stdout)
            return {"size": packet, "passed": True,
                    **({"rtt_ms": float(m.group(1))} if m else {})}
        reply = refusal(r.stdout + r.stderr)
    return {"size": packet, "passed": False, "reply": reply}


def probe(site: Site, addr: str, family: int, mtu: int) -> dict[str, Any]:
    """Both DF probes from `site` to `addr` (the far inner address) for a tunnel MTU `mtu`:
    {family, mtu, at_mtu: {size, passed, rtt_ms}, above_mtu: {size, passed, reply?, wait_s},
    verified}. The one above the MTU waits a few of the first one's RTTs (above_wait)."""
    at = _ping(site, addr, family, mtu, AT_MTU_TRIES)
    wait = above_wait(at.get("rtt_ms"))
    above = {**_ping(site, addr, family, mtu + 1, 1, wait), "wait_s": wait}
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
