"""ipsec: IPsec ESP between the sites. impl=libipsec (strongSwan charon, userspace ESP through
a TUN device), impl=kernel (IKEv2 by charon + swanctl, kernel ESP through xfrm interfaces) or
impl=xfrm (kernel ESP with static per-run keys via `ip xfrm`, no IKE).

impl "" picks kernel where the kernel has ESP (or transport mode / encap off asks for it),
else libipsec. libipsec does tunnel mode only and always encapsulates ESP in UDP (NAT-T).
Each libipsec tunnel is its own charon per site (IKE/NAT-T port 4500+i), whose TUN device
(ipsec0, ipsec1, ...) carries the inner addresses; tunnels=N spreads flows over them by ECMP.
PSKs are generated per run, written mode 0600 and included by swanctl.conf; never printed.

Overhead (ESP with an AEAD: 8 IV, 16 ICV): outer IP (tunnel mode) + UDP 8 (NAT-T) + 8 ESP
header + 8 IV + ciphertext (payload + 2 trailer, padded to 4 bytes) + 16 ICV. `overhead` is the
least ESP adds to a packet (no padding): the contract's `overhead(params, family)`, the same
for every kind. The tunnel MTU is the largest inner packet that fits the underlay MTU
(computed, not a fixed subtraction, so it is at most underlay MTU - overhead), and what a case
records as its overhead is what ESP adds to that packet (`esp_overhead_at`, padding included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..capabilities import Missing, kernel_missing, tool_missing, tun_device_missing
from ..testbed.base import Site, Testbed
from . import _ipsec_up, _spread, _xfrm
from . import _strongswan as ss
from ._esp import ESP_HEADER, ESP_ICV, ESP_IV, ESP_TRAILER, esp_mtu
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

# charon's kernel-libipsec reads at most 1400 bytes per packet from its TUN (fixed in 5.9)
LIBIPSEC_MAX_MTU = 1400
PLUGIN_DIR = Path("/usr/lib/ipsec/plugins")


@dataclass(frozen=True)
class IpsecParams(TunnelParams):
    impl: Literal["", "libipsec", "kernel", "xfrm"] = field(default="", metadata={
        "help": "libipsec (charon, userspace ESP), kernel (IKEv2 + kernel ESP) or xfrm (static "
                "keys); empty: kernel where the kernel has ESP, else libipsec"})
    mode: str = field(default="tunnel", metadata={"help": "ESP mode: tunnel or transport"})
    encap: bool | None = field(default=None, metadata={
        "help": "ESP in UDP (NAT-T); unset: on for libipsec, off for kernel ESP"})
    cipher: str = field(default="aes-gcm-128", metadata={
        "help": "AEAD: aes-gcm-128, aes-gcm-256 or chacha20-poly1305"})
    auth: str = field(default="psk", metadata={"help": "authentication: psk (generated per run)"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})
    tunnels: int = field(default=1, metadata={
        "help": "parallel tunnels, flows spread over them by ECMP; a list "
                "(tunnels = [1, 2, 4]) sweeps it: one tunnel and case per value"})

    def validate(self) -> list[str]:
        problems = []
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
        return str(p.impl)
    if kernel_has_esp(p.underlay) or p.mode == "transport" or p.encap is False:
        return "kernel"
    return "libipsec"


_IKE = Needs(tools=(Tool("charon", "strongswan-charon", "strongSwan IKE daemon"),
                    Tool("swanctl", "strongswan-swanctl", "strongSwan control")),
             packages=("libstrongswan-standard-plugins",))
_KERNEL_ESP = Needs(
    tools=(Tool("ip", "iproute2", "xfrm states, policies and interfaces", ("-V",)),),
    kernel=(KernelOption("CONFIG_INET_ESP", "esp4", "kernel ESP over IPv4"),
            KernelOption("CONFIG_INET6_ESP", "esp6", "kernel ESP over IPv6"),
            KernelOption("CONFIG_XFRM_USER", "xfrm_user", "xfrm configuration"),
            KernelOption("CONFIG_XFRM_INTERFACE", "xfrm_interface", "route-based ESP tunnels"),
            KernelOption("CONFIG_CRYPTO_GCM", "gcm", "kernel AES-GCM"),
            KernelOption("CONFIG_CRYPTO_CHACHA20POLY1305", "chacha20poly1305",
                         "kernel ChaCha20-Poly1305"),
            KernelOption("CONFIG_CRYPTO_SEQIV", "seqiv", "ESP IV generation (GCM)"),
            KernelOption("CONFIG_CRYPTO_ECHAINIV", "echainiv", "ESP IV generation")))


class Ipsec(TunnelDriver[IpsecParams]):
    kind = "ipsec"
    native_beside = True   # native beside it stays native (docs/methodology.md)
    fingerprint_tools = ("swanctl",)
    chain_gateway = "device"
    summary = "IPsec ESP: strongSwan libipsec (userspace), kernel ESP via IKEv2 or static xfrm"
    Params = IpsecParams
    sweep = "tunnels"
    encrypts = True
    userspace = ("libipsec",)     # charon's libipsec; kernel ESP (IKEv2 or static xfrm)
    impl_param = "impl"
    needs = {
        "libipsec": _IKE + Needs(kernel=(KernelOption("CONFIG_TUN", "tun", "libipsec's TUN"),),
                                 packages=("libcharon-extra-plugins",)),
        "kernel": _IKE + _KERNEL_ESP,
        "xfrm": _KERNEL_ESP,
    }

    @classmethod
    def leaves_native(cls, params: IpsecParams) -> bool:
        """Transport mode protects all traffic between the underlay addresses: native beside
        it would be ESP too. Tunnel mode with libipsec only: the kernel's ESP (VM lab) keeps
        the round's pairing until `bench_interleave.py --survey` has run there."""
        return params.mode == "tunnel" and cls.resolve_impl(params) == "libipsec"

    @classmethod
    def resolve_impl(cls, params: IpsecParams) -> str:
        return resolve_impl(params)

    @classmethod
    def requirements(cls, params: IpsecParams) -> list[Missing]:
        impl = resolve_impl(params)
        need: list[Missing | None] = []
        if impl in ("libipsec", "kernel"):
            need += [tool_missing(t.name, t.why) for t in _IKE.tools]
            for plugin, pkg in (("openssl", "libstrongswan-standard-plugins"),
                                *((("kernel-libipsec", "libcharon-extra-plugins"),)
                                  if impl == "libipsec" else ())):
                if not (PLUGIN_DIR / f"libstrongswan-{plugin}.so").exists():
                    need.append(Missing(f"strongSwan plugin {plugin}", f"needed by impl={impl}",
                                        f"apt-get install {pkg}"))
        if impl == "libipsec" and (m := tun_device_missing("libipsec")):
            need.append(m)
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
    def overhead(cls, params: IpsecParams, family: int = 4) -> int:
        """The least ESP adds to an inner packet (no padding; see the module doc)."""
        outer = (IPV4_HEADER if family == 4 else IPV6_HEADER) if params.mode == "tunnel" else 0
        udp = UDP_HEADER if params.use_encap else 0
        return outer + udp + ESP_HEADER + ESP_IV + ESP_ICV + ESP_TRAILER

    @classmethod
    def tunnel_mtu(cls, params: IpsecParams, underlay_mtu: int) -> int:
        mtu = esp_mtu(underlay_mtu, cls.family(params), params.mode, params.use_encap)
        if resolve_impl(params) == "libipsec":
            mtu = min(mtu, LIBIPSEC_MAX_MTU)
        return mtu

    # ---- life cycle ------------------------------------------------------------------
    def up(self, tb: Testbed, params: IpsecParams) -> Endpoints:
        return _ipsec_up.up(self, tb, params, resolve_impl(params))

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: the tunnel devices' counters (summed and per tunnel) and the SAs' bytes
        (`swanctl --list-sas`, or `ip -s xfrm state` for static keys)."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            total: dict[str, int] = {}
            for i, ifname in enumerate(ep.info["devices"][site.name]):
                for k, v in site.links.stats(ifname).items():
                    total[k] = total.get(k, 0) + v
                    total[f"tun{i}_{k}"] = v
            total.update(sa_counters(site, ep))
            out[site.name] = total
        return out


def sa_counters(site: Site, ep: Endpoints) -> dict[str, int]:
    if ep.info["impl"] == "xfrm":     # our SAs only (by reqid), never the host's own
        total = {"sa_bytes": 0, "sa_packets": 0}
        for reqid in ep.info.get("reqids", []):
            one = _xfrm.parse_xfrm_state_stats(site.run(
                ["ip", "-s", "xfrm", "state", "list", "reqid", str(reqid)], timeout=10).stdout)
            total = {k: total[k] + one[k] for k in total}
        return total
    res = {"sa_in_bytes": 0, "sa_out_bytes": 0, "sa_in_packets": 0, "sa_out_packets": 0}
    for conf, vici in ep.info["charons"][site.name]:
        sas = ss.parse_list_sas(ss.swanctl(site, Path(vici), Path(conf), ["--list-sas"],
                                           timeout=15).stdout)
        for child in sas.values():
            for k in res:
                res[k] += int(child[k.removeprefix("sa_")])  # type: ignore[call-overload]
    return res


DRIVER = Ipsec
