"""`tunbench list`: what can run here, and every parameter as TOML that pastes into an
experiment file.

`list --params [KIND]` prints one `[[tunnel]]` (or `[[workload]]`) table per kind with every
parameter at its default and the one-line description its dataclass field declares
(`field(metadata={"help": ...})`); the whole output parses back with tomllib. A parameter
whose default TOML cannot express (None: "unset") is printed commented out.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from . import topologies, tunnels, workloads
from .errors import SpecError
from .shell import Console

LIST_FORMAT = "tunbench-list"
LIST_FORMAT_VERSION = 1


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes, plus DEL (0x7F), which TOML forbids unescaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(v: Any) -> str | None:
    """A default as TOML (None when TOML has no way to say it)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, (list, tuple)):
        items = [toml_value(x) for x in v]
        return None if any(i is None for i in items) else "[" + ", ".join(
            i for i in items if i is not None) + "]"
    if isinstance(v, dict):
        pairs = {k: toml_value(x) for k, x in v.items()}
        if any(i is None for i in pairs.values()):
            return None
        return "{" + ", ".join(f"{toml_string(str(k))} = {i}" for k, i in pairs.items()) + "}"
    return None


def _help(f: dataclasses.Field[Any]) -> str:
    return " ".join(str(f.metadata.get("help", "")).split())


def params_lines(params: Any) -> list[str]:
    """`name = default  # description` per field of a Params dataclass instance."""
    out = []
    for f in dataclasses.fields(params):
        val = toml_value(getattr(params, f.name))
        desc = _help(f)
        if val is None:
            out.append(f"# {f.name} =   # unset by default" + (f"; {desc}" if desc else ""))
        else:
            out.append(f"{f.name} = {val}" + (f"  # {desc}" if desc else ""))
    return out


def tunnel_toml(kind: str, why: list[str]) -> str:
    drv = tunnels.get(kind)
    head = [f"# {kind}: {drv.summary}"] + [f"# not available here: {w}" for w in why]
    if drv.sweep:
        head.append(f"# {drv.sweep} may be a list (one tunnel and case per value)")
    return "\n".join(head + ["[[tunnel]]", f"kind = {toml_value(kind)}"]
                     + params_lines(drv.Params())) + "\n"


def workload_toml(name: str) -> str:
    wl = workloads.get(name)
    head = [f"# {name}: {wl.summary}"]
    head += [f"# not available here: {m.one_line()}" for m in wl.requirements(wl.Params())]
    if wl.sweep:
        left_out = (", ".join(map(str, wl.sweep_default)) if wl.sweep_default
                    else "one case at the default below")
        head.append(f"# {wl.sweep} may be a list (one case per value); left out: {left_out}")
    return "\n".join(head + ["[[workload]]", f"name = {toml_value(name)}"]
                     + params_lines(wl.Params())) + "\n"


def check_kind(name: str) -> str:
    """'tunnel' or 'workload'; a name that is neither is one line, exit 2."""
    if name in tunnels.registry():
        return "tunnel"
    if name in workloads.registry():
        return "workload"
    raise SpecError(f"unknown tunnel kind or workload {name!r}", "tunbench list shows them: "
                    + ", ".join(sorted(tunnels.registry()) + sorted(workloads.registry())))


def params_toml(kinds: dict[str, list[str]], only: str | None = None) -> str:
    """Every kind and workload (or only one) as pasteable TOML."""
    if only:
        return (tunnel_toml(only, kinds.get(only, [])) if check_kind(only) == "tunnel"
                else workload_toml(only))
    parts = ["# tunbench list --params: paste the tables you need into an experiment file"]
    parts += [tunnel_toml(k, why) for k, why in kinds.items()]
    parts += [workload_toml(n) for n in sorted(workloads.registry())]
    return "\n".join(parts)


def params_json(params: Any) -> dict[str, Any]:
    return {f.name: {"default": getattr(params, f.name), "help": _help(f) or None}
            for f in dataclasses.fields(params)}


def list_json(kinds: dict[str, list[str]], presets: dict[str, Any],
              offload_variants: dict[str, Any], only: str | None = None) -> dict[str, Any]:
    """The machine-readable list: versioned, and `reasons` as `tunbench doctor` says."""
    tun = {k: {"available": not why, "reasons": why, "summary": tunnels.get(k).summary,
               "encrypts": tunnels.get(k).encrypts,
               "implementations": {
                   str(r.impl): {"display": r.display, "available": r.available,
                                 "reasons": r.reasons}
                   for r in tunnels.availability(k)[1:]},
               "params": params_json(tunnels.get(k).Params())}
           for k, why in kinds.items()}
    wls = {}
    for n, w in sorted(workloads.registry().items()):
        why = [m.one_line() for m in w.requirements(w.Params())]
        wls[n] = {"available": not why, "reasons": why, "summary": w.summary,
                  "params": params_json(w.Params())}
    if only:
        check_kind(only)
        tun = {k: v for k, v in tun.items() if k == only}
        wls = {k: v for k, v in wls.items() if k == only}
        presets, offload_variants = {}, {}
    return {"format": LIST_FORMAT, "format_version": LIST_FORMAT_VERSION, "tunnels": tun,
            "workloads": wls, "presets": presets, "offload_variants": offload_variants}


def topologies_json(only: str | None = None) -> dict[str, Any]:
    """`list --topologies --json`: every topology's declarations (topologies/base.py)."""
    names = [only] if only else sorted(topologies.registry())
    return {"format": LIST_FORMAT, "format_version": LIST_FORMAT_VERSION,
            "topologies": {n: topologies.get(n).describe() for n in names}}


def print_topologies(only: str | None = None) -> None:
    """`list --topologies`: each topology, how an experiment picks it, its settings with their
    defaults and help, what it needs, and the tunnel kinds and workloads it runs."""
    console = Console()
    table = Table(title="topologies (the same as JSON: tunbench list --topologies --json)")
    table.add_column("topology")
    table.add_column("chosen by / settings")
    table.add_column("needs")
    table.add_column("tunnel kinds / workloads")
    for name in [only] if only else sorted(topologies.registry()):
        d = topologies.get(name).describe()
        settings = [f"[bold]{escape(d['chosen_by'])}[/bold]"] + [escape(
            f"{p['key']}" + (f" ({p['flag']})" if p["flag"] else "")
            + f" = {p['default']}: {p['help']}") for p in d["params"]]
        need = d["needs"]
        needs = [f"tools: {', '.join(need['tools'])}", f"kernel: {', '.join(need['kernel'])}",
                 f"hosts: {need['hosts']}"] + (["root here"] if need["root"] else [])
        here, hosts = d["tunnel_kinds"]["here"], d["tunnel_kinds"]["on_hosts"]
        kinds = [f"here: {', '.join(here)}"] + (
            [f"on hosts: {', '.join(hosts) or 'none (not built on hosts)'}"] if hosts != here
            else ["on hosts: the same"])
        if "gateway_kinds" in d:
            kinds.append(f"gateways: {', '.join(d['gateway_kinds'])}")
        kinds.append("workloads: " + (", ".join(d["workloads"]) if d["workloads"] is not None
                                      else "all"))
        table.add_row(f"{name}\n[dim]{escape(d['summary'])}[/dim]", "\n".join(settings),
                      escape("\n".join(needs)), escape("\n".join(kinds)))
    console.print(table)


def print_presets(presets: dict[str, tuple[str, str]], offloads: dict[str, dict[str, str]]) -> None:
    console = Console()
    table = Table(title="presets (tunbench run --preset NAME [--scale 0.05])")
    table.add_column("preset")
    table.add_column("what (file to copy and edit)")
    for name, (summary, path) in presets.items():
        table.add_row(name, f"{summary}\n[dim]{path}[/dim]")
    console.print(table)
    console.print("offload variants (--offloads): " + "; ".join(
        f"{n}: " + (", ".join(f"{k} {v}" for k, v in s.items()) or "as the kernel set them")
        for n, s in offloads.items()), highlight=False)


def print_list(kinds: dict[str, list[str]], only: str | None = None) -> None:
    """Kinds and workloads, whether each runs here and why not (`only`: one of them);
    parameters are `tunbench list --params`, as TOML."""
    console = Console()
    shown = {k: why for k, why in kinds.items() if only in (None, k)}
    if shown:
        table = Table(title="tunnel kinds")
        table.add_column("kind")
        table.add_column("available")
        table.add_column("summary / why not")
        for kind, why in shown.items():
            drv = tunnels.get(kind)
            text = drv.summary if not why else "\n".join(why)
            table.add_row(kind, "[green]yes[/green]" if not why else "[red]no[/red]", text)
            for r in tunnels.availability(kind)[1:]:   # each implementation, or why not
                table.add_row(f"  {r.display}", "[green]yes[/green]" if r.available else
                              "[red]no[/red]", "\n".join(r.reasons))
        console.print(table)
    wls = {n: w for n, w in sorted(workloads.registry().items()) if only in (None, n)}
    if wls:
        wt = Table(title="workloads")
        wt.add_column("workload")
        wt.add_column("summary")
        for name, wl in wls.items():
            text = wl.summary
            missing = wl.requirements(wl.Params())
            if missing:
                text += "\n[red]" + "; ".join(m.one_line() for m in missing) + "[/red]"
            wt.add_row(name, text)
        console.print(wt)
    console.print("parameters, as TOML for an experiment file: tunbench list --params "
                  + (only or "[KIND]"), highlight=False)
