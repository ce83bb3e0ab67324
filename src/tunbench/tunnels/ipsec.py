"""ipsec: IPsec ESP between the sites. impl=libipsec (strongSwan charon, userspace ESP through
a TUN device), impl=kernel (IKEv2 by charon + swanctl, kernel ESP through xfrm interfaces) or
impl=xfrm (kernel ESP with static per-run keys via `ip xfrm`, no IKE).

impl "" picks kernel where the kernel has ESP (or transport mode / encap off asks for it),
else libipsec. libipsec does tunnel mode only and always encapsulates ESP in UDP (NAT-T).
Each libipsec tunnel is its own charon per site (IKE/NAT-T port 4500+i), whose TUN device
(ipsec0, ipsec1, ...) carries the inner addresses; tunnels=N spreads flows over them by ECMP.
PSKs are generated per run, written mode 0600 and included by swanctl.conf; never printed.

Overhead (ESP with an AEAD: 8 IV, 16 ICV): outer IP (tunnel mode) + UDP 8 (NAT-T) + 8 ESP
header + 8 IV + ciphertext (payload + 2 trailer, padded to 4 bytes) + 16 ICV. The tunnel MTU
is the largest inner packet that fits the underlay MTU (computed, not a fixed subtraction).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..capabilities import Missing, kernel_missing, tool_missing
from ..errors import CommandFailed
from ..testbed import names, netlink
from ..testbed.base import Site, Testbed
from . import _spread, _xfrm
from . import _strongswan as ss
from .base import IPV4_HEADER, IPV6_HEADER, UDP_HEADER, Endpoints, TunnelDriver, TunnelParams

ESP_HEADER, ESP_IV, ESP_ICV, ESP_TRAILER, ESP_ALIGN = 8, 8, 16, 2, 4
IMPLS = ("libipsec", "kernel", "xfrm")
# charon's kernel-libipsec reads at most 1400 bytes per packet from its TUN (fixed in 5.9)
LIBIPSEC_MAX_MTU = 1400
PLUGIN_DIR = Path("/usr/lib/ipsec/plugins")


@dataclass(frozen=True)
class IpsecParams(TunnelParams):
    impl: str = ""                  # libipsec | kernel | xfrm | "" = automatic
    mode: str = "tunnel"            # tunnel | transport
    encap: bool | None = None       # ESP in UDP (NAT-T); None = libipsec: on, kernel: off
    cipher: str = "aes-gcm-128"     # aes-gcm-128 | aes-gcm-256 | chacha20-poly1305
    auth: str = "psk"               # psk (generated per run)
    underlay: Literal[4, 6] = 4
    tunnels: int = 1

    def validate(self) -> list[str]:
        problems = []
        if self.impl not in ("", *IMPLS):
            problems.append(f"impl {self.impl!r} unknown (use libipsec, kernel or xfrm, or "
                            "leave it empty to choose automatically)")
        if self.mode not in ("tunnel", "transport"):
            problems.append(f"mode {self.mode!r} unknown (use tunnel or transport)")
        if self.cipher not in ss.PROPOSALS:
            problems.append(f"unknown cipher {self.cipher!r} (use "
                            f"{', '.join(ss.PROPOSALS)})")
        if self.auth != "psk":
            problems.append(f"auth {self.auth!r} is not supported (use psk)")
        impl = resolve_impl(self)
        if impl == "libipsec" and self.mode == "transport":
            problems.append("transport mode is not possible with libipsec (use mode=tunnel, "
                            "or impl=kernel)")
        if impl == "libipsec" and self.encap is False:
            problems.append("encap=off is not possible with libipsec (it always encapsulates "
                            "ESP in UDP, port 4500; use impl=kernel for plain ESP)")
        if impl == "xfrm" and self.encap:
            problems.append("encap=on needs an IKE daemon's NAT-T socket (use impl=kernel or "
                            "impl=libipsec)")
        if self.mode == "transport" and self.tunnels > 1:
            problems.append("tunnels>1 needs mode=tunnel (transport mode protects the "
                            "underlay addresses themselves)")
        return problems + _spread.validate_tunnels(self.tunnels)

    @property
    def use_encap(self) -> bool:
        return resolve_impl(self) == "libipsec" if self.encap is None else bool(self.encap)


def kernel_has_esp(family: int = 4) -> bool:
    opt = "CONFIG_INET_ESP" if family == 4 else "CONFIG_INET6_ESP"
    return kernel_missing(opt, "kernel ESP", "esp4" if family == 4 else "esp6") is None


def resolve_impl(p: IpsecParams) -> str:
    if p.impl:
        return p.impl
    if kernel_has_esp(p.underlay) or p.mode == "transport" or p.encap is False:
        return "kernel"
    return "libipsec"


def esp_mtu(underlay_mtu: int, family: int, mode: str, encap: bool) -> int:
    """Largest inner packet whose ESP packet fits `underlay_mtu` (pure)."""
    ip_hdr = IPV4_HEADER if family == 4 else IPV6_HEADER
    fixed = ESP_HEADER + ESP_IV + ESP_ICV + (UDP_HEADER if encap else 0)
    if mode == "tunnel":
        room = underlay_mtu - ip_hdr - fixed          # ciphertext: whole inner packet
        return room - room % ESP_ALIGN - ESP_TRAILER
    room = underlay_mtu - ip_hdr - fixed              # transport: inner IP header stays clear
    return room - room % ESP_ALIGN - ESP_TRAILER + ip_hdr


class Ipsec(TunnelDriver):
    kind = "ipsec"
    summary = "IPsec ESP: strongSwan libipsec (userspace), kernel ESP via IKEv2 or static xfrm"
    Params = IpsecParams
    sweep = "tunnels"

    @classmethod
    def requirements(cls, params: TunnelParams) -> list[Missing]:
        assert isinstance(params, IpsecParams)
        impl = resolve_impl(params)
        need: list[Missing | None] = []
        if impl in ("libipsec", "kernel"):
            need += [tool_missing("charon", "strongSwan IKE daemon"),
                     tool_missing("swanctl", "strongSwan control")]
            for plugin, pkg in (("openssl", "libstrongswan-standard-plugins"),
                                *((("kernel-libipsec", "libcharon-extra-plugins"),)
                                  if impl == "libipsec" else ())):
                if not (PLUGIN_DIR / f"libstrongswan-{plugin}.so").exists():
                    need.append(Missing(f"strongSwan plugin {plugin}", f"needed by impl={impl}",
                                        f"apt-get install {pkg}"))
        if impl == "libipsec" and not os.path.exists("/dev/net/tun"):
            need.append(Missing("device /dev/net/tun", "libipsec needs TUN",
                                "use a kernel with CONFIG_TUN"))
        if impl in ("kernel", "xfrm"):
            fam = params.underlay
            need.append(kernel_missing("CONFIG_INET_ESP" if fam == 4 else "CONFIG_INET6_ESP",
                                       f"kernel ESP (impl={impl})",
                                       "esp4" if fam == 4 else "esp6"))
            need.append(kernel_missing("CONFIG_XFRM_USER", "xfrm configuration", "xfrm_user"))
            if params.mode == "tunnel":
                need.append(kernel_missing("CONFIG_XFRM_INTERFACE", "route-based ESP tunnels",
                                           "xfrm_interface"))
            if params.cipher == "chacha20-poly1305":
                need.append(kernel_missing("CONFIG_CRYPTO_CHACHA20POLY1305",
                                           "kernel ChaCha20-Poly1305", "chacha20poly1305"))
            else:
                need.append(kernel_missing("CONFIG_CRYPTO_GCM", "kernel AES-GCM", "gcm"))
        return [m for m in need if m]

    @classmethod
    def overhead(cls, params: TunnelParams, family: int = 4, underlay_mtu: int = 1500) -> int:
        """ESP bytes added to the largest inner packet that fits `underlay_mtu`."""
        assert isinstance(params, IpsecParams)
        return underlay_mtu - esp_mtu(underlay_mtu, family, params.mode, params.use_encap)

    @classmethod
    def tunnel_mtu(cls, params: TunnelParams, underlay_mtu: int) -> int:
        assert isinstance(params, IpsecParams)
        mtu = esp_mtu(underlay_mtu, cls.family(params), params.mode, params.use_encap)
        if resolve_impl(params) == "libipsec":
            mtu = min(mtu, LIBIPSEC_MAX_MTU)
        return mtu

    # ---- life cycle ------------------------------------------------------------------
    def up(self, tb: Testbed, params: TunnelParams) -> Endpoints:
        assert isinstance(params, IpsecParams)
        from . import _ipsec_up
        return _ipsec_up.up(self, tb, params, resolve_impl(params))

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: the tunnel devices' counters (summed and per tunnel) and the SAs' bytes
        (`swanctl --list-sas`, or `ip -s xfrm state` for static keys)."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            total: dict[str, int] = {}
            for i, ifname in enumerate(ep.info["devices"][site.name]):
                for k, v in netlink.link_stats(site.netns, ifname).items():
                    total[k] = total.get(k, 0) + v
                    total[f"tun{i}_{k}"] = v
            total.update(sa_counters(site, ep))
            out[site.name] = total
        return out


def sa_counters(site: Site, ep: Endpoints) -> dict[str, int]:
    if ep.info["impl"] == "xfrm":
        return _xfrm.parse_xfrm_state_stats(
            site.run(["ip", "-s", "xfrm", "state"], timeout=10).stdout)
    res = {"sa_in_bytes": 0, "sa_out_bytes": 0, "sa_in_packets": 0, "sa_out_packets": 0}
    for conf, vici in ep.info["charons"][site.name]:
        sas = ss.parse_list_sas(ss.swanctl(site, Path(vici), Path(conf), ["--list-sas"],
                                           timeout=15).stdout)
        for child in sas.values():
            for k in res:
                res[k] += int(child[k.removeprefix("sa_")])  # type: ignore[call-overload]
    return res


def new_psk() -> str:
    return secrets.token_hex(32)


def wait_device(site: Site, before: set[str], prefix: str, timeout: float = 10.0) -> str:
    """The device named prefix* that appeared in `site` since `before` (charon's TUN)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = sorted(n for n in set(netlink.link_names(site.netns)) - before
                     if n.startswith(prefix))
        if new:
            return new[0]
        time.sleep(0.05)
    raise CommandFailed(f"charon created no {prefix}* device in site {site.name} within "
                        f"{timeout:g}s", "see the case's error_log (charon log)")


def link_name(tb: Testbed, suffix: str) -> str:
    return names.link_name(tb.run_id, suffix)


DRIVER = Ipsec
