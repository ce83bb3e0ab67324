"""agg: the aggregating tunnel, several inner packets under one outer header (docs/agg.md).

Each site runs one `tbagg` (Rust, built by `make loadgen` beside the load generator): it owns
a TUN device, reads inner packets from it and packs consecutive ones for the other site into
one UDP datagram until the size budget (path MTU) or the flush timeout (`flush_us`, 0 = no
aggregation) is reached; the receiving tbagg unpacks them to its own TUN. The daemon is the
datapath, so its PID is the one the CPU sampler tracks. Its counters (inner packets and bytes,
outer datagrams and bytes, malformed drops) are dumped as JSON on SIGUSR1 into the case's
workdir and recorded with the interface counters.

Offload (`offload = true`, the default): tbagg opens the TUN with vnet headers and TSO, so a
large TCP stream is read as 64 kB super-packets, segmented in tbagg before packing (the wire
format is the same), sent with UDP GSO, received with UDP GRO and written back to the TUN as
coalesced super-packets; `offload = false` is the one-packet-per-system-call datapath. What
the kernel granted is recorded per site (`offload_granted`).

Overhead: outer IP (20/40) + UDP 8 + agg header 8 + one 2-byte length = 38 over IPv4, 58 over
IPv6 for a datagram of one packet; each further packet in a datagram costs 2 bytes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Literal

from .. import proc, rustbin
from ..capabilities import Missing, tun_device_missing
from ..errors import CommandFailed
from ..params import out_of_range
from ..testbed import names
from ..testbed.base import Site, Testbed
from . import daemon
from .base import (
    IPV4_HEADER,
    IPV6_HEADER,
    UDP_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    TunnelDriver,
    TunnelParams,
    inner_addrs,
)

AGG_HEADER = 8
SEPARATOR = 2
BINARY = "tbagg"
ENV = "TUNBENCH_TBAGG"
BUILD_FIX = rustbin.build_fix(ENV)
DUMP_TIMEOUT = 5.0
TXQLEN = 10000


@dataclass(frozen=True)
class AggParams(TunnelParams):
    flush_us: int = field(default=50, metadata={
        "help": "flush timeout in microseconds: a datagram leaves at most this long after its "
                "first packet (0 = no aggregation, one packet per datagram; up to 1000000)"})
    port: int = field(default=6636, metadata={"help": "outer UDP port on both sites"})
    vni: int = field(default=1, metadata={"help": "tunnel id in every datagram (1..16777215)"})
    queues: int = field(default=1, metadata={
        "help": "TUN queues, one sender thread each (1..16; >1 opens IFF_MULTI_QUEUE)"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})
    offload: bool = field(default=True, metadata={
        "help": "TUN vnet headers with TSO/checksum offload, UDP GSO/GRO and TCP coalescing "
                "in tbagg (true/false; false = one inner packet per TUN read and write)"})

    def validate(self) -> list[str]:
        return out_of_range(flush_us=(self.flush_us, 0, 1_000_000), port=(self.port, 1, 65535),
                            vni=(self.vni, 1, 2**24 - 1), queues=(self.queues, 1, 16))


def find_binary() -> str | None:
    return rustbin.find(BINARY, ENV)


def binary_missing() -> Missing | None:
    return rustbin.missing(BINARY, ENV, "the aggregating datapath")


@dataclass(frozen=True)
class Dump:
    """One tbagg stats dump: its sequence number, its counters, and how long packets waited
    in tbagg between their read from the TUN and the sendmmsg that carried them (µs: count,
    p50, p90, p99, p99_9, max), the latency that aggregation adds."""
    dumps: int
    counters: dict[str, int]
    wait_us: dict[str, int]
    config: dict[str, object] = field(default_factory=dict)


def parse_stats(text: str) -> Dump:
    """A tbagg stats dump (JSON) -> Dump (pure)."""
    raw = json.loads(text)
    if not isinstance(raw, dict) or raw.get("tool") != BINARY:
        raise ValueError("not a tbagg stats dump")
    return Dump(int(raw["dumps"]), {str(k): int(v) for k, v in raw["counters"].items()},
                {str(k): int(v) for k, v in raw.get("tx_wait_us", {}).items()},
                dict(raw.get("config", {})))


def max_payload(underlay_mtu: int, family: int) -> int:
    """The largest UDP payload one outer datagram may have: the size budget."""
    return underlay_mtu - (IPV4_HEADER if family == 4 else IPV6_HEADER) - UDP_HEADER


def endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class Agg(TunnelDriver[AggParams]):
    kind = "agg"
    native_beside = True   # native beside it stays native (docs/methodology.md)
    summary = ("aggregating userspace tunnel (tbagg): several small packets per UDP datagram, "
               "flush_us bounds the wait")
    Params = AggParams
    encrypts = False
    userspace = ("",)              # tbagg, a userspace daemon on a TUN device (L3)
    # the flush-timeout trade-off (report/tradeoff.py): against kernel VXLAN, the same UDP
    # encapsulation one packet per datagram
    aggregates = "flush_us"
    aggregation_baseline = "vxlan"
    needs = {"": Needs(kernel=(KernelOption("CONFIG_TUN", "tun", "tbagg's TUN device"),))}

    @classmethod
    def requirements(cls, params: AggParams) -> list[Missing]:
        missing = cls.declared_missing(None)
        if (m := binary_missing()):
            missing.append(m)
        if (m := tun_device_missing("tbagg")):
            missing.append(m)
        return missing

    @classmethod
    def orchestrator_requirements(cls, params: AggParams) -> list[Missing]:
        """Sites over SSH need no Rust toolchain: tbagg built here is copied to a host that
        has none on PATH (rustbin.on_site); the host's kernel (CONFIG_TUN) is checked there."""
        return [m for m in (binary_missing(),) if m]

    @classmethod
    def overhead(cls, params: AggParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return outer + UDP_HEADER + AGG_HEADER + SEPARATOR

    # ---- life cycle ------------------------------------------------------------------
    def up(self, tb: Testbed, params: AggParams) -> Endpoints:
        fam = params.underlay
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        a4, b4, a6, b6 = inner_addrs(0)
        devices: dict[str, str] = {}
        stats: dict[str, str] = {}
        pids: dict[str, list[int]] = {}
        granted: dict[str, bool] = {}
        for site, me4, me6 in ((tb.a, a4, a6), (tb.b, b4, b6)):
            peer = tb.other(site)
            ifname = names.link_name(tb.run_id, f"agg{site.name}")
            path = tb.site_dir(site) / f"tbagg-{site.name}.json"
            # registered before the daemon exists: undone after it is stopped (its TUN goes
            # with it; a SIGKILLed one leaves its last dump)
            site.record_link(tb.ledger, ifname)
            site.record_leftover(tb.ledger, path)
            site.record_leftover(tb.ledger, f"{path}.tmp")
            binary = rustbin.on_site(tb, site, BINARY, ENV, "tbagg_copied_to",
                                     "the aggregating datapath")
            argv = [binary, "--dev", ifname,
                    "--local", endpoint(self.underlay_addr(site, fam), params.port),
                    "--remote", endpoint(self.underlay_addr(peer, fam), params.port),
                    "--vni", str(params.vni), "--flush-us", str(params.flush_us),
                    "--max-payload", str(max_payload(tb.underlay_mtu, fam)),
                    "--queues", str(params.queues), "--offload", "1" if params.offload else "0",
                    "--stats", str(path)]
            p = daemon.start(tb, site, argv, "tbagg", ready_text="tbagg: ready", timeout=15)
            # the dump written before "ready" says what the kernel granted (an old kernel may
            # refuse vnet headers/TSO: tbagg then runs without offload)
            granted[site.name] = bool(read_dump(site, str(path)).config.get("offload"))
            links = site.links
            # a deep TUN queue: the reader thread is a userspace process the scheduler may
            # hold off for milliseconds on a loaded host (the kernel tunnels have no such hop)
            links.set_link(ifname, mtu=mtu, txqlen=TXQLEN)
            links.add_addr(ifname, f"{me4}/24")
            links.add_addr(ifname, f"{me6}/64")
            links.set_link(ifname, state="up")
            devices[site.name], stats[site.name], pids[site.name] = ifname, str(path), [p.pid]
        return Endpoints(
            a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params, fam),
            a_ifname=devices[tb.a.name], b_ifname=devices[tb.b.name],
            rx_ifnames=(devices[tb.b.name],), datapath_pids=pids,
            info={"flush_us": params.flush_us, "port": params.port, "vni": params.vni,
                  "queues": params.queues, "underlay": fam, "devices": devices,
                  "offload": params.offload, "offload_granted": granted,
                  "stats": stats, "max_payload": max_payload(tb.underlay_mtu, fam)})

    # ---- proof and health --------------------------------------------------------------
    def wire_tx(self, tb: Testbed, ep: Endpoints) -> tuple[int, int] | None:
        """Site a's datagrams and their bytes on an Ethernet wire, from tbagg's own counters:
        with offload, equal-sized datagrams leave in one UDP GSO send, which a veth's counters
        see as one frame (docs/agg.md, Offloads)."""
        c = self.dump(ep, tb.a).counters
        outer = 14 + (20 if ep.info.get("underlay", 4) == 4 else 40) + 8
        return int(c["tx_datagrams"]), int(c["tx_wire_bytes"]) + int(c["tx_datagrams"]) * outer

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: the TUN device's interface counters and tbagg's own (prefixed `agg_`),
        from a dump made now (SIGUSR1, then the dump count must grow)."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            st = site.links.stats(ep.info["devices"][site.name])
            dump = self.dump(ep, site)
            st.update({f"agg_{k}": v for k, v in dump.counters.items()})
            out[site.name] = st
        return out

    @staticmethod
    def dump(ep: Endpoints, site: Site) -> Dump:
        """A fresh dump of the tbagg in `site`: counters and the wait histogram's summary."""
        return fresh_dump(site, ep.datapath_pids[site.name][0], ep.info["stats"][site.name])


def read_dump(site: Site, path: str) -> Dump:
    return parse_stats(site.read_file(path).decode())


def _signal(site: Site, pid: int, sig: signal.Signals) -> bool:
    """Send `sig` to our own tbagg by PID on the site's host; False when it is gone."""
    if site.remote:
        return site.run(["kill", "-s", sig.name.removeprefix("SIG"), str(pid)],
                        check=False, timeout=10).ok
    if not proc.pid_alive(pid):
        return False
    os.kill(pid, sig)
    return True


def fresh_dump(site: Site, pid: int, path: str) -> Dump:
    """Ask tbagg (our own daemon, by PID) for a dump and wait until it is written: a check
    on the dump count, not a sleep."""
    before = read_dump(site, path).dumps
    if not _signal(site, pid, signal.SIGUSR1):
        raise CommandFailed(f"tbagg (pid {pid}) in site {site.name} has exited",
                            f"see its log in the case directory next to {path}")
    deadline = time.monotonic() + DUMP_TIMEOUT
    while time.monotonic() < deadline:
        now = read_dump(site, path)
        if now.dumps > before:
            return now
        time.sleep(0.002)
    raise CommandFailed(f"tbagg (pid {pid}) in site {site.name} wrote no counters within "
                        f"{DUMP_TIMEOUT:g}s", "the host may be overloaded")


DRIVER = Agg
