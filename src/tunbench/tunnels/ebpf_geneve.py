"""ebpf-geneve: tbtun, the project's eBPF tunnel, with Geneve on the wire (RFC 8926, no
options, Ethernet payload like the kernel's Geneve device). See tunnels/_tbtun.py and
docs/tbtun.md. Needs no kernel Geneve: both ends are tbtun (interop: VM lab)."""

from __future__ import annotations

from ._tbtun import TbtunDriver


class EbpfGeneve(TbtunDriver):
    kind = "ebpf-geneve"
    summary = "tbtun: rule-based eBPF tunnel (tc), Geneve on the wire"
    encap = "geneve"


DRIVER = EbpfGeneve
