"""ebpf-vxlan: tbtun, the project's eBPF tunnel, with VXLAN on the wire (RFC 7348; byte
compatible with the kernel's VXLAN device). See tunnels/_tbtun.py and docs/tbtun.md."""

from __future__ import annotations

from ._tbtun import TbtunDriver


class EbpfVxlan(TbtunDriver):
    kind = "ebpf-vxlan"
    summary = "tbtun: rule-based eBPF tunnel (tc), VXLAN on the wire"
    encap = "vxlan"


DRIVER = EbpfVxlan
