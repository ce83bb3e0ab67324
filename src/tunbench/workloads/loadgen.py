"""One trial of the native UDP load generator (loadgen/, binary `tunbench-loadgen`).

A trial: start `recv` in site b, wait for its `ready` line on stderr, run `send` in site a, wait
for both, parse both JSON objects. Building argv, running and parsing are separate; the parsers
(`parse_send`, `parse_recv`, `trial_result`) are pure functions tested on captured real output
in tests/data/loadgen/.

Accounting decisions (see docs/loss-search.md):
- loss = packets the sender's kernel accepted (END `total_sent`) minus unique packets received;
  receiver socket drops (SO_RXQ_OVFL) are *counted as loss* - they are packets the far site
  did not deliver at this load, so a search never reports a rate the receiving site cannot
  absorb - and flagged per trial (`socket_drops`) so a reader can tell where the loss was.
- a sender-limited trial (achieved < 98% of target) did not offer the load: a search treats it
  as a failed trial (RFC 2544) or counts the unsent packets as bad (MLRsearch's loss ratio).
- END packets (3 rounds per flow after the data, carrying the counts) are not data: one the
  path drops is not loss. They are kept apart (`end_sent`, `end_received`): a counter on the
  path (a WAN's tbf, chain/hops.py) counts them with the data, right after an overload
  (docs/chains.md, "Per-hop figures").
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import proc, rustbin
from ..capabilities import Missing
from ..errors import CommandFailed
from ..testbed.base import Site, Testbed
from . import traffic

BINARY = "tunbench-loadgen"
ENV = "TUNBENCH_LOADGEN"
BUILD_FIX = rustbin.build_fix(ENV)
END_PAYLOAD = 54   # an END packet's UDP payload (loadgen/src/proto.rs END_LEN)


def find_binary() -> str | None:
    return rustbin.find(BINARY, ENV)


def binary_missing() -> Missing | None:
    return rustbin.missing(BINARY, ENV)


def require_binary() -> str:
    path = find_binary()
    if path is None:
        m = binary_missing()
        from ..errors import UnavailableError
        raise UnavailableError(m.one_line() if m else BINARY, BUILD_FIX)
    return path


@dataclass(frozen=True)
class TrafficSpec:
    """What one trial sends: a size profile (a fixed IP size, the simple IMIX, a custom weighted
    `mix` or an RFC 6985 `genome`; traffic.profile) over N flows."""
    size: str = "imix"          # a decimal IP total length, "imix", "mix" or "genome"
    flows: int = 100
    port: int = 5301
    src_port: int | None = None  # base source port (socket i uses base+i); None = kernel picks
    seed: int = 1
    family: int = 4             # the simple IMIX's small packets are 60 B over IPv6
    mix: str = ""               # "SIZE:WEIGHT,..." for size "mix"
    genome: str = ""            # RFC 6985 letters for size "genome"
    # full 4-tuple flows (traffic.FlowSet, lockstep): extra addresses that exist on the sites
    # (add_flow_addresses), source ports stepped with the flows, destination ports P..P+K-1
    srcs: tuple[str, ...] = ()
    dsts: tuple[str, ...] = ()
    src_ports: int | None = None
    ports_count: int = 1

    def profile(self) -> traffic.SizeProfile:
        return traffic.profile(self.size, self.family, self.mix, self.genome)

    def mix_args(self) -> list[str]:
        return list(self.profile().args)


def recv_argv(binary: str, bind: str, spec: TrafficSpec, duration: float,
              per_flow: bool = False, capture: bool = False) -> list[str]:
    if len(spec.dsts) > 1:   # several destination addresses: receive on all of them
        bind = "::" if ":" in bind else "0.0.0.0"
    argv = [binary, "recv", "--bind", bind, "--port", str(spec.port), "--timeout-idle", "5",
            "--max-seconds", f"{duration + 30:g}"]
    if spec.ports_count > 1:
        argv += ["--ports-count", str(spec.ports_count)]
    return argv + (["--per-flow"] if per_flow else []) + (["--capture"] if capture else [])


def send_argv(binary: str, dst: str, spec: TrafficSpec, duration: float,
              rate_pps: float | None, threads: int = 1) -> list[str]:
    argv = [binary, "send", "--dst", ",".join(spec.dsts) or dst, "--port", str(spec.port),
            "--flows", str(spec.flows), *spec.mix_args(), "--duration", f"{duration:g}",
            "--seed", str(spec.seed)]
    if spec.srcs:
        argv += ["--src", ",".join(spec.srcs)]
    if spec.src_ports is not None:
        argv += ["--src-ports", str(spec.src_ports)]
    if spec.ports_count > 1:
        argv += ["--ports-count", str(spec.ports_count)]
    if threads > 1:
        argv += ["--threads", str(threads)]
    if spec.src_port is not None:
        argv += ["--src-port", str(spec.src_port)]
    if rate_pps is not None:
        argv += ["--rate-pps", f"{rate_pps:.3f}"]
    return argv


def _json_object(text: str, role: str) -> dict[str, Any]:
    return rustbin.json_result(text, BINARY, role)


def parse_send(text: str) -> dict[str, Any]:
    """The sender's figures (pure)."""
    d = _json_object(text, "send")
    return {k: d.get(k) for k in (
        "target_pps", "target_bps_l3", "rate_mode", "duration_s", "duration_target_s",
        "sent_packets", "sent_bytes_l3", "sent_bytes_l2", "achieved_pps", "achieved_bps_l3",
        "achieved_bps_l2", "sender_limited", "per_size_sent", "per_flow_sent", "send_errors",
        "flows", "interrupted", "effective_batch", "end_packets_sent")} | {
            "mean_size_l3": d["mix"]["mean_size_l3"], "mix_kind": d["mix"]["kind"]}


def parse_recv(text: str) -> dict[str, Any]:
    """The receiver's figures (pure)."""
    d = _json_object(text, "recv")
    return {k: d.get(k) for k in (
        "received_packets", "unique_packets", "duplicates", "reordered", "expected_packets",
        "lost", "loss_ratio", "per_size_received", "latency_us", "latency_source",
        "flows_seen", "end_received", "end_packets", "socket_drops", "rx_pps", "rx_bps_l3",
        "received_bytes_l3", "received_bytes_l2", "stop_reason", "per_flow", "capture")}


@dataclass
class TrialResult:
    """One trial: what was asked, offered, received and lost, and the latency."""
    intended_pps: float | None      # None = unpaced
    duration_s: float               # measured data-phase length
    offered: int                    # packets the sender's kernel accepted
    offered_pps: float
    offered_bps_l3: float
    offered_bps_l2: float
    received: int                   # unique packets received
    lost: int
    loss_ratio: float
    sender_limited: bool
    socket_drops: int               # counted in `lost`; flagged here
    latency_us: dict[str, Any]
    mean_size_l3: float
    per_size_sent: dict[str, int] = field(default_factory=dict)
    per_size_received: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0             # trial wall time incl. start/stop overhead
    end_sent: int = 0               # END packets (not data): sent after the data
    end_received: int = 0           # ... and received (those lost are not in `lost`)

    @property
    def end_lost(self) -> int:
        """END packets the path dropped: not the trial's loss, but a drop counter on the path
        counts them with the data."""
        return max(self.end_sent - self.end_received, 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_result(send: dict[str, Any], recv: dict[str, Any],
                 intended_pps: float | None) -> TrialResult:
    """Combine the parsed sender and receiver figures (pure).

    Without an END (recv.lost null) the expected count falls back to the sender's own count.
    """
    offered = int(send["sent_packets"])
    received = int(recv["unique_packets"])
    expected = recv["expected_packets"] if recv["expected_packets"] is not None else offered
    lost = int(recv["lost"]) if recv["lost"] is not None else expected - received
    ratio = lost / expected if expected else 0.0
    return TrialResult(
        intended_pps=intended_pps, duration_s=float(send["duration_s"]), offered=offered,
        offered_pps=float(send["achieved_pps"]), offered_bps_l3=float(send["achieved_bps_l3"]),
        offered_bps_l2=float(send["achieved_bps_l2"]), received=received, lost=lost,
        loss_ratio=ratio, sender_limited=bool(send["sender_limited"]),
        socket_drops=int(recv["socket_drops"] or 0), latency_us=dict(recv["latency_us"] or {}),
        mean_size_l3=float(send["mean_size_l3"]),
        per_size_sent=dict(send["per_size_sent"] or {}),
        per_size_received=dict(recv["per_size_received"] or {}),
        end_sent=int(send.get("end_packets_sent") or 0),
        end_received=int(recv.get("end_packets") or 0))


def _inner_prefix(site: Site, ifname: str, addr: str) -> int:
    """The prefix length `addr` has on `ifname` (the tunnel's inner subnet)."""
    r = site.run(["ip", "-j", "addr", "show", "dev", ifname], timeout=10)
    for link in json.loads(r.stdout or "[]"):
        for a in link.get("addr_info", []):
            if a.get("local") == addr:
                return int(a["prefixlen"])
    raise CommandFailed(f"{addr} is not on {ifname} in site {site.name}",
                        "the tunnel's endpoints must name their inner devices")


def add_flow_addresses(tb: Testbed, a: tuple[str, str], b: tuple[str, str],
                       flows: traffic.FlowSet) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The source addresses (site a) and destination addresses (site b) of a flow set: the
    tunnel's own inner addresses first, then addresses added next to them on the inner devices
    (`a`, `b` = (address, ifname)), taken from the top of the inner subnet so they are on-link
    through the tunnel; each removed at teardown by the ledger. The subnet must have room."""
    (a_addr, a_if), (b_addr, b_if) = a, b
    plen = _inner_prefix(tb.a, a_if, a_addr)
    net = ipaddress.ip_interface(f"{a_addr}/{plen}").network
    want = flows.src_addrs - 1 + flows.dst_addrs - 1
    taken = {ipaddress.ip_address(a_addr), ipaddress.ip_address(b_addr)}
    if net.num_addresses - 2 - len(taken) < want:
        raise CommandFailed(f"the tunnel's inner subnet {net} has no room for {want} more "
                            "addresses", "use flows = N (source ports) with this tunnel")
    pool = (net.network_address + net.num_addresses - 2 - i for i in range(want + 2))
    extra = [ip for ip in pool if ip not in taken][:want]
    srcs, dsts = extra[:flows.src_addrs - 1], extra[flows.src_addrs - 1:]
    for site, ifname, addrs in ((tb.a, a_if, srcs), (tb.b, b_if, dsts)):
        for ip in addrs:
            cidr = f"{ip}/{plen}"
            site.run(["ip", "addr", "add", cidr, "dev", ifname]
                     + (["nodad"] if ip.version == 6 else []), timeout=10)
            site.record_command(tb.ledger, ["ip", "addr", "del", cidr, "dev", ifname])
    return (a_addr, *map(str, srcs)), (b_addr, *map(str, dsts))


def binary_on(tb: Testbed, site: Site) -> str:
    """The load generator as `site` runs it (rustbin.on_site: ours, or copied to a host)."""
    return rustbin.on_site(tb, site, BINARY, ENV, "loadgen_copied_to")


def wait_ready(p: proc.Process, timeout: float = 10.0) -> None:
    """The receiver prints `ready` on stderr once its sockets are bound."""
    proc.wait_ready(p, ready=lambda: "ready" in p.errors().split(), timeout=timeout)


# How long the receiver may take after the sender exits: the END rounds (20 + 40 ms apart), its
# 300 ms drain, and a backlog to work through on a loaded host.
RECV_AFTER_SEND = 5.0


def sender_threads(requested: int = 0) -> int:
    """Sender threads: `requested`, or 0 = one per CPU this process may use (at most 4)."""
    return requested if requested > 0 else max(1, min(4, len(os.sched_getaffinity(0))))


def run_trial(tb: Testbed, dst: str, spec: TrafficSpec, duration: float,
              rate_pps: float | None, *, label: str = "loadgen", sender: Site | None = None,
              receiver: Site | None = None, bind: str | None = None, capture: bool = False,
              threads: int = 1) -> TrialResult:
    """One trial from site a to `dst` in site b; both processes are stopped by PID on any exit.
    `capture`: the receiver counts at site b's devices (AF_PACKET ring) instead of sockets; the
    caller has installed the drop filter (testbed/bpfdrop.py). `threads`: sender threads."""
    sender, receiver = sender or tb.a, receiver or tb.b
    t0 = time.monotonic()
    recv = tb.spawn(receiver, recv_argv(binary_on(tb, receiver), bind or dst, spec, duration, capture=capture),
                    f"{label}-recv",
                    split_stderr=True, grace=1.0)
    send = None
    try:
        wait_ready(recv)
        send = tb.spawn(sender, send_argv(binary_on(tb, sender), dst, spec, duration, rate_pps, threads),
                        f"{label}-send", split_stderr=True, grace=1.0)
        code = send.wait(timeout=duration + 20)
        if code != 0:
            raise CommandFailed(f"{BINARY} send exited with {code}: {send.log_tail(2)}",
                                argv=send.argv)
        try:
            rcode = recv.wait(timeout=RECV_AFTER_SEND)
        except CommandFailed:
            # no END arrived (everything lost, e.g. a dead path): SIGTERM makes the receiver
            # report what it counted; the sender's own count then gives the loss
            rcode = recv.stop(grace=5.0) or 0
        if rcode != 0:
            raise CommandFailed(f"{BINARY} recv exited with {rcode}: {recv.log_tail(2)}",
                                argv=recv.argv)
        result = trial_result(parse_send(send.output()), parse_recv(recv.output()), rate_pps)
    finally:
        for p in (send, recv):
            if p is not None:
                p.stop(grace=1.0)
    result.wall_s = time.monotonic() - t0
    return result
