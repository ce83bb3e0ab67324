"""A case document's tunnel and workload sections as written, for every topology (runner.run_case
writes every case's document): what a reader must not have to guess, taken from the drivers'
declarations at write time."""

from __future__ import annotations

from typing import Any

from . import tunnels, workloads
from .plan import Case
from .results.model import TunnelRecord, WorkloadRecord


def tunnel_identity(case: Case) -> dict[str, Any]:
    """The case's tunnel section, with what a reader must not have to guess, recorded at write
    time: the implementation resolved on this host (wireguard kernel|go, ipsec
    libipsec|kernel|xfrm, ovs-* netdev|system; None for a kind with one), whether it
    encrypts, the name the report shows ('wireguard (go)'), what it carries and whether its
    datapath runs in the kernel (the driver's `carries`, `userspace`: tunbench advise)."""
    t = case.tunnel
    drv = tunnels.get(t.kind)
    impl = drv.resolve_impl(t.params)
    rec = TunnelRecord(impl, drv.encrypts, drv.display(t.params, t.label), tuple(drv.carries),
                       drv.kernel_datapath(impl), drv.aggregation())
    return {**t.to_dict(), **rec.to_dict()}


def workload_identity(case: Case) -> dict[str, Any]:
    """The case's workload section with what the report judges it by, recorded at write time
    from its driver (headline metrics, sweep parameter), so no reader asks a registry."""
    wl = workloads.get(case.workload.name)
    params = case.workload.to_dict().get("params") or {}
    axes = tuple(p for p in dict.fromkeys((*wl.axes, *([wl.sweep] if wl.sweep else ())))
                 if p in params)
    rec = WorkloadRecord(tuple(wl.headline), wl.sweep, axes)
    return {**case.workload.to_dict(), **rec.to_dict()}
