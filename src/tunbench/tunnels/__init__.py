"""Tunnel kinds: every module in this package that defines DRIVER is registered by its kind.

Everything central about tunnels is derived from the drivers' declarations here (never listed
by hand): the kinds each topology takes (`hub_kinds`, `chain_site_kinds`,
`chain_gateway_kinds`), the tools a campaign's fingerprint compares (`fingerprint_tools`),
install hints (`tool_packages`), the tools whose versions a campaign records and
doctor shows (`declared_tools`), doctor's kernel options (`kernel_options`), the VM lab's
modules and guest packages (`kernel_modules`, `kernel_impl_packages`), and the availability of
every implementation of every kind (`availability`) for `list` and `doctor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import proc
from ..capabilities import Missing
from ..errors import SpecError, TunbenchError
from ..registry import discover
from .base import Endpoints, KernelOption, Needs, Tool, TunnelDriver, TunnelParams

_REGISTRY: dict[str, type[TunnelDriver[Any]]] = {}


def registry() -> dict[str, type[TunnelDriver[Any]]]:
    if not _REGISTRY:
        _REGISTRY.update(discover(__name__, __path__, "DRIVER", "kind"))
    return _REGISTRY


def get(kind: str) -> type[TunnelDriver[Any]]:
    reg = registry()
    if kind not in reg:
        raise SpecError(f"unknown tunnel kind {kind!r}",
                        f"known kinds: {', '.join(sorted(reg))}; see `tunbench list`")
    return reg[kind]


def _all_needs() -> list[Needs]:
    return [drv.declared() for _, drv in sorted(registry().items())]


def declared_tools() -> dict[str, Tool]:
    """Every tool a driver declares, by name (the first declaration wins)."""
    out: dict[str, Tool] = {}
    for need in _all_needs():
        for t in need.tools:
            out.setdefault(t.name, t)
    return out


def tool_packages() -> dict[str, str]:
    """tool -> Debian package, as the drivers declare them (install hints)."""
    return {name: t.package for name, t in declared_tools().items()}


proc.add_package_source(tool_packages)   # install hints for what only a driver declares


def kernel_options() -> list[str]:
    """Every kernel option a driver declares, in registry order."""
    return list(dict.fromkeys(k.option for need in _all_needs() for k in need.kernel))


def kernel_modules() -> list[str]:
    """Every kernel module a driver declares (the VM lab loads these)."""
    return list(dict.fromkeys(k.module for need in _all_needs() for k in need.kernel
                              if k.module))


def kernel_impl_packages() -> list[str]:
    """Debian packages of the implementations that need the kernel (kernel WireGuard, kernel
    ESP, the OVS system datapath, the kernel link kinds): what the VM lab's guest must hold to
    prove the kinds this host cannot run."""
    out: list[str] = []
    for _, drv in sorted(registry().items()):
        impls = drv.implementations() or (None,)
        for impl in impls:
            need = drv.declared(impl)
            if any(k.module for k in need.kernel if k.option != "CONFIG_TUN"):
                out += need.debian_packages()
    return list(dict.fromkeys(out))


def hub_kinds() -> tuple[str, ...]:
    """The kinds with a hub variant (hubcase.py), in registry order."""
    return tuple(k for k, drv in sorted(registry().items()) if drv.hub_capable)


def mesh_kinds(on_hosts: bool = False) -> tuple[str, ...]:
    """The kinds that run between two sites of a mesh (testbed/mesh.py), in registry order;
    `on_hosts`: of a mesh on hosts (testbed/meshhosts.py), without the kinds that cannot run
    between hosts (not_on_hosts)."""
    return tuple(k for k, drv in sorted(registry().items())
                 if drv.mesh_capable and not (on_hosts and drv.not_on_hosts))


def chain_site_kinds() -> tuple[str, ...]:
    """The kinds that run at the sites of a chain between hosts (chain/hosts.py)."""
    return tuple(k for k, drv in sorted(registry().items()) if drv.chain_site_capable)


def chain_gateway_kinds() -> tuple[str, ...]:
    """The kinds a pair of chain gateways can terminate (chain/gateway.py)."""
    return tuple(k for k, drv in sorted(registry().items()) if drv.chain_gateway)


def fingerprint_tools(kind: str) -> tuple[str, ...]:
    """The tools whose version shapes a kind's figures; () for a kind this build lacks."""
    drv = registry().get(kind)
    return tuple(drv.fingerprint_tools) if drv is not None else ()


@dataclass(frozen=True)
class Availability:
    """One row of `list` / `doctor`: a kind, or one implementation of it."""

    kind: str
    impl: str | None
    display: str
    available: bool
    reasons: list[str]


def _check(drv: type[TunnelDriver[Any]], raw: dict[str, Any]) -> tuple[bool, list[str]]:
    try:
        params = drv.parse_params(raw)
        missing: list[Missing] = drv.requirements(params)
    except TunbenchError as exc:
        return False, [exc.one_line()]
    except Exception as exc:  # a driver's bug must not hide the others
        return False, [f"requirements() failed: {type(exc).__name__}: {exc}"]
    return not missing, [m.one_line() for m in missing]


def availability(kind: str) -> list[Availability]:
    """The kind with its default params (implementation chosen automatically), then each of
    its implementations: available here, or exactly why not."""
    drv = get(kind)
    ok, why = _check(drv, {})
    rows = [Availability(kind, None, kind, ok, why)]
    for impl in drv.implementations():
        ok, why = _check(drv, {str(drv.impl_param): impl})
        rows.append(Availability(kind, impl, f"{kind} ({impl})", ok, why))
    if len(rows) > 1:  # the kind runs if any implementation does (chosen automatically)
        rows[0] = Availability(kind, None, kind, rows[0].available or any(
            r.available for r in rows[1:]), rows[0].reasons)
    return rows


__all__ = ["Availability", "Endpoints", "KernelOption", "Needs", "Tool", "TunnelDriver",
           "TunnelParams", "availability", "chain_gateway_kinds", "chain_site_kinds",
           "declared_tools", "fingerprint_tools", "get", "hub_kinds", "kernel_impl_packages",
           "kernel_modules", "kernel_options", "registry", "tool_packages"]
