"""wan: the link between the two sides, as a hop of its own: tbf shaping on both egress
sides (each direction gets the rate), so its drops are counted on this hop and nowhere else.

netem (delay, jitter, loss) only where the kernel has it (CONFIG_NET_SCH_NETEM); elsewhere
they are refused in one line. No fixed delay is offered without netem: the ways to make one
here (a tbf queue kept full, timer-driven userspace forwarding) are not accurate to the
microsecond under load, and a WAN figure that silently drifts is worse than none.
"""

from __future__ import annotations

from typing import Any

from ..testbed.ledger import Ledger
from ..testbed.netem import Netem
from .base import RATE_RE, SIZE_RE, TIME_RE, Function, Hop, Param

NETEM_KEYS = ("delay", "jitter", "loss")


def tbf_args(params: dict[str, Any]) -> list[str]:
    return ["tbf", "rate", params["rate"], "burst", params["burst"],
            "latency", params["queue"]]


def qdisc_argvs(params: dict[str, Any], ifname: str) -> list[list[str]]:
    """tc commands for one egress side (netem at the root and tbf below it when both)."""
    net = Netem(delay=params["delay"] or None, jitter=params["jitter"] or None,
                loss=params["loss"] or None)
    out: list[list[str]] = []
    if net.active:
        out.append(["tc", "qdisc", "replace", "dev", ifname, "root", "handle", "1:", "netem",
                    *net.args()])
        if params["rate"]:
            out.append(["tc", "qdisc", "replace", "dev", ifname, "parent", "1:1",
                        "handle", "10:", *tbf_args(params)])
    elif params["rate"]:
        out.append(["tc", "qdisc", "replace", "dev", ifname, "root", *tbf_args(params)])
    return out


class Wan(Function):
    kind = "wan"
    summary = "the WAN between the sides: tbf rate (both directions); netem where the kernel has it"
    tools = ("tc",)
    params = {
        "rate": Param(str, "", RATE_RE, "a tc rate like 200mbit (empty: not shaped)",
                      '"200mbit"'),
        # 256kb as the testbed's own tbf: room for 64 KB GSO frames, and for the late timer
        # wake-ups of a busy host (a 32kb bucket lost ~3% of the rate here)
        "burst": Param(str, "256kb", SIZE_RE, "tbf's bucket, bytes (256kb, 64k, 4096)",
                       '"256kb"'),
        "queue": Param(str, "25ms", TIME_RE, "tbf's queue as time at the rate (25ms)",
                       '"25ms"'),
        "delay": Param(str, "", TIME_RE, "a time like 25ms (needs netem)", '"25ms"'),
        "jitter": Param(str, "", TIME_RE, "a time like 5ms (needs netem and a delay)", '"5ms"'),
        "loss": Param(str, "", None, "a percentage like 0.1% (needs netem)", '"0.1%"'),
    }

    @classmethod
    def check(cls, params: dict[str, Any]) -> list[str]:
        net = Netem(delay=params["delay"] or None, jitter=params["jitter"] or None,
                    loss=params["loss"] or None)
        return net.validate("wan")

    @classmethod
    def host_problems(cls, params: dict[str, Any]) -> list[str]:
        asked = [k for k in NETEM_KEYS if params.get(k)]
        if not asked:
            return []
        from ..capabilities import kernel_missing
        missing = kernel_missing("CONFIG_NET_SCH_NETEM", "netem", "sch_netem")
        if missing is None:
            return []
        return [f"WAN {'/'.join(asked)} needs netem, which this kernel lacks "
                f"(CONFIG_NET_SCH_NETEM): leave {'/'.join(asked)} out and keep the rate, or "
                "run on a kernel with netem (e.g. the VM lab)"]

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        for ifname in (hop.left_if, hop.right_if):   # both directions; gone with the netns
            for argv in qdisc_argvs(hop.params, ifname):
                hop.run(argv, timeout=10)


FUNCTION = Wan
