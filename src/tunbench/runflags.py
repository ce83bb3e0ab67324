"""iperf3's own flags on `tunbench run`: -P/--streams, -R/--reverse, --bidir.

They mean what they mean to iperf3 (-R: the server side, site b, sends to site a; --bidir:
both directions at once; -P: parallel streams) and land in the parameters of every chosen
workload that takes them, named as the flags when a value is wrong. A list of stream counts
(`-P 1,4,16`) on a workload that sweeps `streams` (parallel-streams) is its sweep; on one that
takes a single count (stream) the workload is run once per count, labelled NAME-N, which the
report reads as one sweep over streams (the recorded workload axes). A flag no chosen
workload takes is refused, one line, exit 2; so is --bidir when a chosen workload sends one
way (takes -R) but cannot send both ways at once: it would run one way under a flag that
says both. Workloads without a direction (latency, ping) are left as they are. Pure: tested
without a testbed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import inputs, spec, workloads
from .errors import SpecError

FLAG_NAMES = {"streams": "-P/--streams", "reverse": "-R/--reverse", "bidir": "--bidir"}


def parse_streams(text: str) -> list[int]:
    """`-P 4` or `-P 1,4,16` -> the stream counts (positive integers, each once)."""
    out = []
    for part in inputs.split_list("--streams", text):
        if not part.isdigit() or int(part) < 1:
            raise SpecError(f"-P/--streams {text!r}: {part!r} is not a stream count",
                            "give positive integers, e.g. -P 4 or -P 1,4,16")
        out.append(int(part))
    return out


def _fields(name: str) -> set[str]:
    wl = workloads.registry().get(name)
    return {f.name for f in dataclasses.fields(wl.Params)} if wl is not None else set()


def _check(name: str, table: dict[str, Any], given: set[str]) -> None:
    """The table's parameters as the workload would parse them; a problem is named as the
    flag that set the value."""
    wl = workloads.registry()[name]
    points = table.get(wl.sweep) if wl.sweep else None
    if isinstance(points, list):   # a sweep (a preset's streams = [1, ..., 512]): each point
        for point in points:
            _check(name, {**table, str(wl.sweep): point}, given)
        return
    fields = _fields(name)
    try:
        wl.parse_params({k: v for k, v in table.items() if k in fields})
    except SpecError as exc:
        problem = exc.message.split(": ", 1)[-1]
        flag = next((FLAG_NAMES[k] for k in given if problem.startswith(k)),
                    "/".join(FLAG_NAMES[k] for k in sorted(given)))
        raise SpecError(f"{flag}: {problem}", "fix the flag's value; nothing was changed") \
            from None


def _one_way_refused(tables: list[Any]) -> None:
    """--bidir with a workload that has a direction (-R) but no --bidir: refused."""
    names = [t.get("name") for t in tables if isinstance(t, dict)]
    one_way = sorted({n for n in names if isinstance(n, str)
                      and "reverse" in _fields(n) and "bidir" not in _fields(n)})
    if one_way:
        both = sorted(n for n in workloads.registry() if "bidir" in _fields(n))
        raise SpecError(f"--bidir: {', '.join(one_way)} cannot send both ways at once",
                        f"only {', '.join(both)} can: leave the others out of --workloads "
                        "or run them without --bidir")


def apply(merged: dict[str, Any], streams: list[int] | None, reverse: bool,
          bidir: bool) -> None:
    """Set the flags on the experiment's [[workload]] tables (the defaults when it has none)."""
    if reverse and bidir:
        raise SpecError("-R/--reverse and --bidir exclude each other",
                        "-R: site b sends to site a; --bidir: both directions at once; give one")
    given = {k for k, on in (("streams", streams), ("reverse", reverse), ("bidir", bidir)) if on}
    if not given:
        return
    tables = merged.get("workload") or [{"name": w} for w in spec.DEFAULT_WORKLOADS]
    if bidir:
        _one_way_refused(tables)
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    for table in tables:
        name = table.get("name") if isinstance(table, dict) else None
        mine = given & _fields(name) if isinstance(name, str) else set()
        if not mine:
            out.append(table)
            continue
        taken |= mine
        base = {**table, **{k: True for k in mine & {"reverse", "bidir"}}}
        if "streams" not in mine or streams is None:
            _check(str(name), base, mine)
            out.append(base)
        elif workloads.registry()[str(name)].sweep == "streams" or len(streams) == 1:
            new = {**base, "streams": streams if len(streams) > 1 else streams[0]}
            for n in streams:
                _check(str(name), {**new, "streams": n}, mine)
            out.append(new)
        else:   # one table per count, NAME-N: the report reads them as one sweep
            label = str(base.get("label", name))
            for n in streams:
                one = {**base, "streams": n, "label": f"{label}-{n}"}
                _check(str(name), one, mine)
                out.append(one)
    for key in sorted(given - taken):
        takers = sorted(n for n in workloads.registry() if key in _fields(n))
        raise SpecError(f"{FLAG_NAMES[key]} applies to none of the workloads chosen",
                        f"add one that takes it: --workloads {','.join(takers)}")
    merged["workload"] = out
