"""impl=auto on sites on real hosts: chosen from each site's own kernel and tools.

On the local testbed both sites share this host, so a driver's `resolve_impl` asks this
host. Between hosts each site is asked (capabilities.viewing: its kernel configuration and
PATH, read by its agent), and the two answers must agree: wireguard kernel|go, ipsec
kernel|libipsec, ovs-* system|netdev. When they differ, the first of the two choices (in the
driver's order) that both sites can run is taken; when neither runs on both, one line says
what each site lacks, before anything is changed on any host.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import tunnels
from .capabilities import HostView, viewing
from .errors import SpecError
from .spec import Experiment, TunnelSpec
from .tunnels.base import AUTO_IMPLS


@dataclasses.dataclass(frozen=True)
class Choice:
    impl: str
    per_site: dict[str, str]     # what each site alone would choose

    def describe(self) -> dict[str, Any]:
        return {"impl": self.impl, "auto_per_site": dict(self.per_site)}


def choose(exp: Experiment, views: dict[str, HostView | None]) -> dict[str, Choice]:
    """Tunnel label -> the implementation both sites run, for every tunnel left on auto."""
    out: dict[str, Choice] = {}
    problems = []
    for t in exp.tunnels:
        drv = tunnels.get(t.kind)
        if not drv.impl_param or getattr(t.params, drv.impl_param) not in AUTO_IMPLS:
            continue
        picks: dict[str, str] = {}
        for name, view in views.items():
            with viewing(view):
                picks[name] = str(drv.resolve_impl(t.params))
        common = [i for i in drv.implementations() if i in picks.values()
                  and all(not _missing(drv, i, v) for v in views.values())]
        if picks["a"] == picks["b"] or common:
            out[t.label] = Choice(picks["a"] if picks["a"] == picks["b"] else common[0], picks)
            continue
        why = [f"{impl} on site {name}: {lack}" for impl in dict.fromkeys(picks.values())
               for name, view in views.items() if (lack := _missing(drv, impl, view))]
        problems.append(f"tunnel {t.label}: {drv.impl_param}=auto chooses {picks['a']} on "
                        f"{_where('a', views['a'])} but {picks['b']} on "
                        f"{_where('b', views['b'])}, and neither runs on both "
                        f"({'; '.join(why)})")
    if problems:
        raise SpecError("; ".join(problems), "install what is missing on one site, or give "
                        "the implementation explicitly (e.g. impl=go, datapath=netdev)")
    return out


def apply(spec: TunnelSpec, choices: dict[str, Choice]) -> TunnelSpec:
    """The tunnel with its implementation made explicit (what the drivers then run)."""
    choice = choices.get(spec.label)
    drv = tunnels.get(spec.kind)
    if choice is None or not drv.impl_param:
        return spec
    params = dataclasses.replace(spec.params, **{drv.impl_param: choice.impl})
    return dataclasses.replace(spec, params=params)


def _missing(drv: Any, impl: str, view: HostView | None) -> str:
    with viewing(view):
        return "; ".join(m.one_line() for m in drv.declared_missing(impl))


def _where(name: str, view: HostView | None) -> str:
    return view.where if view is not None else f"site {name} (this host)"
