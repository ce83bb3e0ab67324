"""WAN emulation on the underlay: netem delay, jitter, loss and rate on both underlay ends.

Values are tc's own units, checked here before anything changes (one line per problem):
delay/jitter `25ms`, `500us`, `0.2s`; loss `0.1%`; rate `100mbit` (bit, kbit, mbit, gbit, or
bps, kbps, ... for bytes). Both ends get the same qdisc, so a round trip sees the delay twice.
With the testbed's tbf `--rate` as well, netem is the root qdisc and tbf its child.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TIME_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
LOSS_RE = re.compile(r"^(\d+(?:\.\d+)?)%$")
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$", re.I)
NETEM_LIMIT = 10000   # packets queued by netem (its default 1000 drops at high rate x delay)
TIME_MAX_S = 10.0


def seconds(value: str) -> float:
    m = TIME_RE.match(value)
    if not m:
        raise ValueError(value)
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


@dataclass(frozen=True)
class Netem:
    delay: str | None = None
    jitter: str | None = None
    loss: str | None = None
    rate: str | None = None

    @property
    def active(self) -> bool:
        return any((self.delay, self.jitter, self.loss, self.rate))

    def validate(self, where: str = "experiment",
                 names: dict[str, str] | None = None) -> list[str]:
        """Problems, one line each, naming the field (or, via `names`, the flag that set it:
        delay, jitter, loss, netem_rate -> e.g. --delay) and a valid example."""
        def spot(key: str) -> str:
            return (names or {}).get(key) or f"{where}.{key}"

        problems: list[str] = []
        for name in ("delay", "jitter"):
            val = getattr(self, name)
            if val is None:
                continue
            if not isinstance(val, str) or not TIME_RE.match(val):
                problems.append(f"{spot(name)} {val!r} is not a time like 25ms, 500us or 0.2s")
            elif seconds(val) > TIME_MAX_S:
                problems.append(f"{spot(name)} {val} is longer than {TIME_MAX_S:g}s")
        if self.jitter is not None and self.delay is None and not problems:
            problems.append(f"{spot('jitter')} needs a delay (e.g. --delay 25ms --jitter 5ms)")
        if self.loss is not None:
            m = LOSS_RE.match(self.loss) if isinstance(self.loss, str) else None
            if not m or not 0 <= float(m.group(1)) <= 100:
                problems.append(f"{spot('loss')} {self.loss!r} is not a percentage from 0% to "
                                "100% like 0.1%")
        if self.rate is not None and (not isinstance(self.rate, str)
                                      or not RATE_RE.match(self.rate)
                                      or not float(re.sub(r"[a-z]+$", "", self.rate.lower()))):
            problems.append(f"{spot('netem_rate')} {self.rate!r} is not a rate above 0 like "
                            "100mbit")
        return problems

    def args(self) -> list[str]:
        """netem's own arguments (after `netem`)."""
        argv = ["limit", str(NETEM_LIMIT)]
        if self.delay:
            argv += ["delay", self.delay] + ([self.jitter] if self.jitter else [])
        if self.loss:
            argv += ["loss", self.loss]
        if self.rate:
            argv += ["rate", self.rate]
        return argv

    def describe(self) -> dict[str, Any]:
        return {"delay": self.delay, "jitter": self.jitter, "loss": self.loss,
                "rate": self.rate, "applied_to": "both underlay ends (egress)",
                "qdisc": "netem " + " ".join(self.args())}


def qdisc_argvs(ifname: str, netem: Netem | None, tbf_rate: str | None,
                tbf_args: list[str]) -> list[list[str]]:
    """tc commands for one underlay end: netem at the root, tbf below it when both are asked."""
    if netem is None or not netem.active:
        return [["tc", "qdisc", "replace", "dev", ifname, "root", *tbf_args]] if tbf_rate else []
    out = [["tc", "qdisc", "replace", "dev", ifname, "root", "handle", "1:", "netem",
            *netem.args()]]
    if tbf_rate:
        out.append(["tc", "qdisc", "replace", "dev", ifname, "parent", "1:1", "handle", "10:",
                    *tbf_args])
    return out
