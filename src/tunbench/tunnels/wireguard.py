"""wireguard: WireGuard between the two sites, kernel module or wireguard-go (userspace).

impl "kernel": `ip link add NAME type wireguard`, configured with `wg set`.
impl "go": one `wireguard-go -f NAME` per site and tunnel (foreground, so the PID we hold is
the daemon's; it is the datapath, and the CPU sampler tracks it). wireguard-go's control
sockets live in /var/run/wireguard, which every namespace shares, so interface names carry the
run id (unique system-wide) and `wg show NAME` (never plain `wg show`) is used.
impl "" picks kernel where the kernel has WireGuard, else go.

Keys are generated per run with `wg genkey`/`wg pubkey`, written mode 0600 into the case's
private workdir and handed to `wg` by path; they are never printed or logged.
Overhead: outer IP (20/40) + UDP 8 + WireGuard 32 (type/reserved 4, receiver 4, counter 8,
Poly1305 tag 16) = 60 over IPv4, 80 over IPv6.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from ..capabilities import Missing, kernel_missing, tun_device_missing
from ..errors import CommandFailed
from ..testbed import names
from ..testbed.base import Site, Testbed
from . import _spread, daemon
from .base import (
    IPV4_HEADER,
    IPV6_HEADER,
    UDP_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    Tool,
    TunnelDriver,
    TunnelParams,
)
from .base import inner_addrs as _inner_addrs

WG_HEADER = 32
SOCKET_DIR = "/var/run/wireguard"


@dataclass(frozen=True)
class WireguardParams(TunnelParams):
    impl: Literal["", "kernel", "go"] = field(default="", metadata={
        "help": "kernel (module) or go (wireguard-go); empty: kernel where the kernel has it, "
                "else go"})
    port: int = field(default=51820, metadata={
        "help": "UDP listen port of tunnel 0 (tunnel i uses port + i)"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})
    tunnels: int = field(default=1, metadata={
        "help": "parallel tunnels, flows spread over them by ECMP; a list "
                "(tunnels = [1, 2, 4]) sweeps it: one tunnel and case per value"})
    keepalive: int = field(default=0, metadata={
        "help": "persistent-keepalive seconds (0 = off)"})

    def validate(self) -> list[str]:
        problems = []
        if not 0 < self.port < 65536 - self.tunnels:
            problems.append(f"port {self.port} out of range (1..{65535 - self.tunnels})")
        if not 0 <= self.keepalive <= 65535:
            problems.append(f"keepalive {self.keepalive} out of range (0..65535 seconds)")
        return problems + _spread.validate_tunnels(self.tunnels)


def kernel_has_wireguard() -> bool:
    return kernel_missing("CONFIG_WIREGUARD", "kernel WireGuard", "wireguard") is None


def resolve_impl(params: WireguardParams) -> str:
    if params.impl:
        return str(params.impl)
    return "kernel" if kernel_has_wireguard() else "go"


def parse_transfer(text: str) -> dict[str, tuple[int, int]]:
    """`wg show IFNAME transfer` -> {peer public key: (rx bytes, tx bytes)} (pure)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out[parts[0]] = (int(parts[1]), int(parts[2]))
    return out


def endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class Wireguard(TunnelDriver[WireguardParams]):
    kind = "wireguard"
    native_beside = True   # native beside it stays native (docs/methodology.md)
    fingerprint_tools = ("wg", "wireguard-go")
    chain_gateway = "device"
    summary = "WireGuard (kernel module or wireguard-go userspace daemon), impl=kernel|go"
    Params = WireguardParams
    sweep = "tunnels"
    encrypts = True
    userspace = ("go",)           # wireguard-go; the kernel module otherwise
    impl_param = "impl"
    needs = {
        "": Needs(tools=(Tool("wg", "wireguard-tools", "configures WireGuard interfaces"),)),
        "kernel": Needs(kernel=(KernelOption("CONFIG_WIREGUARD", "wireguard",
                                             "kernel WireGuard (impl=kernel)"),)),
        "go": Needs(tools=(Tool("wireguard-go", "wireguard-go",
                                "userspace WireGuard (impl=go)"),),
                    kernel=(KernelOption("CONFIG_TUN", "tun", "wireguard-go's TUN device"),)),
    }

    @classmethod
    def resolve_impl(cls, params: WireguardParams) -> str:
        return resolve_impl(params)

    @classmethod
    def requirements(cls, params: WireguardParams) -> list[Missing]:
        impl = resolve_impl(params)
        missing = cls.declared_missing(impl)
        if impl == "go" and (m := tun_device_missing("wireguard-go")):
            missing.append(m)
        return missing

    @classmethod
    def overhead(cls, params: WireguardParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return outer + UDP_HEADER + WG_HEADER

    # ---- life cycle ------------------------------------------------------------------
    def up(self, tb: Testbed, params: WireguardParams) -> Endpoints:
        impl = resolve_impl(params)
        fam = params.underlay
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        pids: dict[str, list[int]] = {tb.a.name: [], tb.b.name: []}
        hops: dict[str, list[_spread.Hop]] = {tb.a.name: [], tb.b.name: []}
        devices: dict[str, list[str]] = {tb.a.name: [], tb.b.name: []}
        a6: str | None  # the inner IPv6 of the service addresses may be absent (tunnels=N)
        b6: str | None
        for i in range(params.tunnels):
            a4, b4, a6, b6 = _inner_addrs(i)
            keys = {s.name: self._keypair(tb, s, f"wg{i}-{s.name}") for s in tb.sites()}
            for site, peer, me4, me6, p4, p6 in ((tb.a, tb.b, a4, a6, b4, b6),
                                                 (tb.b, tb.a, b4, b6, a4, a6)):
                # unique system-wide: wireguard-go's socket directory is shared by all netns
                ifname = names.link_name(tb.run_id, f"wg{tb.link_tag}{i}{site.name}")
                devices[site.name].append(ifname)
                if impl == "go":
                    pids[site.name].append(self._start_go(tb, site, ifname, i))
                else:
                    site.record_link(tb.ledger, ifname)
                    site.run(["ip", "link", "add", ifname, "type", "wireguard"], timeout=15)
                private, _ = keys[site.name]
                _, peer_pub = keys[peer.name]
                argv = ["wg", "set", ifname, "private-key", str(private),
                        "listen-port", str(params.port + i), "peer", peer_pub,
                        "endpoint", endpoint(self.underlay_addr(peer, fam), params.port + i),
                        "allowed-ips", ",".join(self._allowed(p4, p6, i, params, peer)
                                                + list(tb.behind.get(peer.name, ())))]
                if params.keepalive:
                    argv += ["persistent-keepalive", str(params.keepalive)]
                site.run(argv, timeout=15)
                links = site.links
                links.set_link(ifname, mtu=mtu)
                links.add_addr(ifname, f"{me4}/24")
                links.add_addr(ifname, f"{me6}/64")
                links.set_link(ifname, state="up")
                hops[site.name].append(_spread.Hop(ifname, p4, p6))
        if params.tunnels > 1:
            a4, b4, a6, b6 = _spread.setup(tb, hops)
        else:
            a4, b4, a6, b6 = _inner_addrs(0)
        return Endpoints(
            a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params, fam),
            a_ifname=devices[tb.a.name][0], b_ifname=devices[tb.b.name][0],
            rx_ifnames=tuple(devices[tb.b.name]),
            datapath_pids={k: v for k, v in pids.items() if v},
            info={"impl": impl, "port": params.port, "underlay": fam, "devices": devices,
                  "keepalive": params.keepalive, **_spread.describe(params.tunnels)})

    @staticmethod
    def _allowed(p4: str, p6: str, i: int, params: WireguardParams, peer: Site) -> list[str]:
        allowed = [f"{p4}/32", f"{p6}/128"]
        if params.tunnels > 1:
            j = 1 if peer.name == "b" else 0
            allowed += [f"{_spread.SERVICE4[j]}/32", f"{_spread.SERVICE6[j]}/128"]
        return allowed

    @staticmethod
    def _keypair(tb: Testbed, site: Site, stem: str) -> tuple[os.PathLike[str], str]:
        """A fresh private key (file, 0600, on the host of `site`, the one that uses it) and
        its public key, made by that site's own `wg` (so this host needs none when the sites
        are remote). Nothing secret is printed or enters an argv."""
        private = site.run(["wg", "genkey"], timeout=10).stdout.strip()
        path = tb.write_secret(f"{stem}.key", private + "\n", site)
        public = site.run(["wg", "pubkey"], input=private + "\n", timeout=10).stdout.strip()
        del private
        return path, public

    @staticmethod
    def _start_go(tb: Testbed, site: Site, ifname: str, i: int) -> int:
        sock = f"{SOCKET_DIR}/{ifname}.sock"

        def sock_exists() -> bool:   # on the site's host
            return site.exists(sock)

        # Registered before the daemon exists: undone after it is stopped (it removes its
        # socket itself on SIGTERM; a SIGKILLed one leaves it, and the ledger removes it).
        site.record_leftover(tb.ledger, sock)
        site.record_link(tb.ledger, ifname)
        if sock_exists():
            raise CommandFailed(f"{sock} already exists: another wireguard-go uses {ifname}",
                                "run `tunbench cleanup`")
        p = daemon.start(tb, site, ["wireguard-go", "-f", ifname], f"wireguard-go{i}",
                         ready=lambda: sock_exists() and _wg_answers(site, ifname),
                         env={"LOG_LEVEL": "verbose"}, timeout=15)
        return p.pid

    # ---- proof and health --------------------------------------------------------------
    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: every wg device's interface counters (summed and per tunnel) and the
        bytes WireGuard itself reports per peer (`wg show IFNAME transfer`)."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            total: dict[str, int] = {}
            for i, ifname in enumerate(ep.info["devices"][site.name]):
                st = site.links.stats(ifname)
                tr = parse_transfer(site.run(["wg", "show", ifname, "transfer"],
                                             timeout=10).stdout)
                st["wg_rx_bytes"] = sum(rx for rx, _ in tr.values())
                st["wg_tx_bytes"] = sum(tx for _, tx in tr.values())
                for k, v in st.items():
                    total[k] = total.get(k, 0) + v
                    total[f"tun{i}_{k}"] = v
            out[site.name] = total
        return out


def _wg_answers(site: Site, ifname: str) -> bool:
    return site.run(["wg", "show", ifname], check=False, timeout=5).ok


DRIVER = Wireguard
