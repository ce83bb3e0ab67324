"""ESP's sizes (pure): the largest inner packet that fits an underlay MTU, and what ESP adds
to it. For the ipsec driver (tunnel_mtu, overhead) and its bring-up (the overhead a case
records): below both, so neither imports the other for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import IPV4_HEADER, IPV6_HEADER, UDP_HEADER

if TYPE_CHECKING:
    from .ipsec import IpsecParams

ESP_HEADER, ESP_IV, ESP_ICV, ESP_TRAILER, ESP_ALIGN = 8, 8, 16, 2, 4


def esp_mtu(underlay_mtu: int, family: int, mode: str, encap: bool) -> int:
    """Largest inner packet whose ESP packet fits `underlay_mtu` (pure)."""
    ip_hdr = IPV4_HEADER if family == 4 else IPV6_HEADER
    fixed = ESP_HEADER + ESP_IV + ESP_ICV + (UDP_HEADER if encap else 0)
    if mode == "tunnel":
        room = underlay_mtu - ip_hdr - fixed          # ciphertext: whole inner packet
        return room - room % ESP_ALIGN - ESP_TRAILER
    room = underlay_mtu - ip_hdr - fixed              # transport: inner IP header stays clear
    return room - room % ESP_ALIGN - ESP_TRAILER + ip_hdr


def esp_overhead_at(params: IpsecParams, family: int, underlay_mtu: int) -> int:
    """What ESP adds to the largest inner packet that fits `underlay_mtu` (padding included):
    the overhead a case records."""
    return underlay_mtu - esp_mtu(underlay_mtu, family, params.mode, params.use_encap)
