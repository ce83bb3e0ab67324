"""`tunbench advise DIR [DIR...]` and the same constraint options on `tunbench report`:
the command-line side of report/advise.py. Its parser is added to the main command line by
cli.build_parser (add_parser), like the store's and the schedule's."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .advise_names import NEEDS, PREFER

if TYPE_CHECKING:   # advise (and scipy behind it) only once a command runs, not to parse
    from . import advise


def parse_max_cpu(text: str) -> tuple[float, bool]:
    """'--max-cpu-per-gbit 30' (% of one core per Gbit/s, as the tables show it) or '2x'
    (a multiple of native's): (value, relative), or one SpecError naming the flag."""
    raw = text.strip().lower()
    relative = raw.endswith(("x", "×"))
    try:
        v = float(raw[:-1] if relative else raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0 or v > 1e6:
        raise SpecError(f"--max-cpu-per-gbit {text!r} is not a positive number",
                        "e.g. --max-cpu-per-gbit 30 (% of one core per Gbit/s) or 2x "
                        "(twice native's)")
    return v, relative


def check_options(min_mtu: int | None, streams: int | None) -> None:
    """The numeric constraints in range, before any folder is read."""
    if min_mtu is not None and not 68 <= min_mtu <= 65535:
        raise SpecError(f"--min-mtu {min_mtu} is outside 68-65535",
                        "e.g. --min-mtu 1400 (the inner MTU a method must leave)")
    if streams is not None and not 1 <= streams <= 4096:
        raise SpecError(f"--streams {streams} is outside 1-4096",
                        "give a stream count the campaign measured, e.g. --streams 1")


def add_constraint_options(p: argparse.ArgumentParser) -> None:
    """--need, --min-mtu, --max-cpu-per-gbit, --streams, --prefer: on advise and report."""
    p.add_argument("--need", action="append", choices=NEEDS, metavar="encryption",
                   help="keep only methods that encrypt")
    p.add_argument("--min-mtu", dest="min_mtu", type=int, metavar="N",
                   help="keep only methods leaving an inner MTU of at least N bytes "
                   "(at the underlay MTU the summary uses, 1500 when measured)")
    p.add_argument("--max-cpu-per-gbit", dest="max_cpu_per_gbit", metavar="X",
                   help="keep only methods needing at most X %% of one core per Gbit/s, or "
                   "at most X times native's with a trailing x (e.g. 2x)")
    p.add_argument("--streams", type=int, metavar="N", help="judge throughput and CPU at N "
                   "parallel streams (a count the campaign measured; default: the fewest)")
    p.add_argument("--prefer", choices=PREFER,
                   help="rank by share of native throughput (default where measured), "
                   "latency added (p50; default otherwise) or CPU per Gbit/s against native's")


def constraints_from(args: argparse.Namespace) -> advise.Constraints:
    """The constraints of a command line, each checked (one SpecError line, exit 2) before
    any folder is read."""
    from . import advise
    check_options(args.min_mtu, args.streams)
    if args.need and len(args.need) != len(set(args.need)):
        raise SpecError("--need encryption given twice", "give each need once")
    max_cpu, relative = (parse_max_cpu(args.max_cpu_per_gbit)
                         if args.max_cpu_per_gbit is not None else (None, False))
    return advise.Constraints(need_encryption="encryption" in (args.need or []),
                              min_mtu=args.min_mtu, max_cpu=max_cpu,
                              max_cpu_relative=relative, streams=args.streams,
                              prefer=args.prefer)


def cmd_advise(args: argparse.Namespace) -> int:
    constraints = constraints_from(args)
    dirs = [Path(d) for d in args.dirs]
    if len(set(d.resolve() for d in dirs)) != len(dirs):
        raise SpecError("the same result folder is given twice",
                        "name each campaign once (pooling one with itself doubles its rounds)")
    from . import advise, console, data
    camps = [data.load(d) for d in dirs]
    for c in camps:
        console.print_folder_problems(c.folder)
    a = advise.build(camps, constraints)
    if args.json:
        print(json.dumps(advise.to_json(a), indent=1))
    else:
        from . import advise_view
        advise_view.print_advice(a)
    return 0


def add_parser(shared: Any) -> None:
    a = shared.add_parser("advise", help="which method to use under your constraints: the "
                          "decision summary and a ranking of a result folder (or several, "
                          "pooled round by round), with the methods excluded and why")
    a.add_argument("dirs", nargs="+", metavar="DIR", help="result folder(s) with index.json")
    add_constraint_options(a)
    a.add_argument("--json", action="store_true", help="print one JSON object "
                   "(format tunbench-advice)")
    a.set_defaults(func=cmd_advise)
