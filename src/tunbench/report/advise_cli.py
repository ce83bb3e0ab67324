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
from .advise_names import CARRIES, NEEDS, PREFER

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


def check_options(min_mtu: int | None, streams: int | None, mtu: int | None = None,
                  max_added_p99: float | None = None) -> None:
    """The numeric constraints in range, before any folder is read."""
    if min_mtu is not None and not 68 <= min_mtu <= 65535:
        raise SpecError(f"--min-mtu {min_mtu} is outside 68-65535",
                        "e.g. --min-mtu 1400 (the inner MTU a method must leave)")
    if streams is not None and not 1 <= streams <= 4096:
        raise SpecError(f"--streams {streams} is outside 1-4096",
                        "give a stream count the campaign measured, e.g. --streams 1")
    if mtu is not None and not 68 <= mtu <= 65535:
        raise SpecError(f"--mtu {mtu} is outside 68-65535",
                        "give an underlay MTU the campaign measured, e.g. --mtu 9000")
    if max_added_p99 is not None and not (math.isfinite(max_added_p99)
                                          and 0 <= max_added_p99 <= 1e9):
        raise SpecError(f"--max-added-p99 {max_added_p99:g} is not a latency in µs",
                        "e.g. --max-added-p99 200 (µs added at p99 over native)")


def add_constraint_options(p: argparse.ArgumentParser) -> None:
    """The constraints, the figure ranked by and the variant: on advise and report."""
    p.add_argument("--need", action="append", choices=NEEDS, metavar="encryption",
                   help="keep only methods that encrypt (a chain counts when its gateways do)")
    p.add_argument("--carries", action="append", choices=CARRIES, metavar="udp|l2|tcp",
                   help="keep only methods carrying this traffic between the sites (as the "
                   "tunnel drivers declare it): udp (any IP packet; not a TCP relay such as "
                   "ssh-forward), l2 (Ethernet frames); repeatable")
    p.add_argument("--kernel-only", dest="kernel_only", action="store_true",
                   help="keep only methods whose datapath runs in the kernel (eBPF included; "
                   "no userspace daemon such as wireguard-go, libipsec, OVS netdev, ssh)")
    p.add_argument("--min-mtu", dest="min_mtu", type=int, metavar="N",
                   help="keep only methods leaving an inner MTU of at least N bytes "
                   "(at the underlay MTU the summary uses, 1500 when measured)")
    p.add_argument("--max-cpu-per-gbit", dest="max_cpu_per_gbit", metavar="X",
                   help="keep only methods needing at most X %% of one core per Gbit/s, or "
                   "at most X times native's with a trailing x (e.g. 2x)")
    p.add_argument("--max-added-p99", dest="max_added_p99", type=float, metavar="US",
                   help="keep only methods adding at most US µs of latency at p99 over native")
    p.add_argument("--streams", type=int, metavar="N", help="judge throughput and CPU at N "
                   "parallel streams (a count the campaign measured; default: the fewest)")
    p.add_argument("--by", "--prefer", dest="prefer", choices=PREFER, metavar="FIGURE",
                   help="rank by: throughput (share of native at --streams, default where "
                   "measured), throughput-best (at each method's best stream count), ndr, pdr, "
                   "rfc2544 (loss-search packets/s at --frame-size), latency-p50 (latency "
                   "added; default without throughput), latency-p99, cpu (CPU per Gbit/s "
                   "against native's)")
    p.add_argument("--frame-size", dest="frame_size", metavar="SIZE",
                   help="the loss-search frame size ranked at (e.g. 361, imix; default: the "
                   "smallest measured)")
    p.add_argument("--mtu", type=int, metavar="N", help="figures at this underlay MTU (a "
                   "variant the campaign measured; default 1500 when measured)")
    p.add_argument("--offloads", metavar="NAME", help="figures at this offload variant (one the "
                   "campaign measured, e.g. no-tso-gro; default: default)")


def constraints_from(args: argparse.Namespace) -> advise.Constraints:
    """The constraints of a command line, each checked (one SpecError line, exit 2) before
    any folder is read."""
    from . import advise
    check_options(args.min_mtu, args.streams, args.mtu, args.max_added_p99)
    if args.need and len(args.need) != len(set(args.need)):
        raise SpecError("--need encryption given twice", "give each need once")
    max_cpu, relative = (parse_max_cpu(args.max_cpu_per_gbit)
                         if args.max_cpu_per_gbit is not None else (None, False))
    return advise.Constraints(need_encryption="encryption" in (args.need or []),
                              min_mtu=args.min_mtu, max_cpu=max_cpu,
                              max_cpu_relative=relative, streams=args.streams,
                              prefer=args.prefer,
                              carries=tuple(dict.fromkeys(args.carries or ())),
                              max_added_p99=args.max_added_p99, kernel_only=args.kernel_only,
                              mtu=args.mtu, offloads=args.offloads,
                              frame_size=args.frame_size)


def cmd_advise(args: argparse.Namespace) -> int:
    constraints = constraints_from(args)
    dirs = [Path(d) for d in args.dirs]
    if len(set(d.resolve() for d in dirs)) != len(dirs):
        raise SpecError("the same result folder is given twice",
                        "name each campaign once (pooling one with itself doubles its rounds)")
    from . import advise, console, data, mesh
    camps = [data.load(d) for d in dirs]
    for c in camps:
        console.print_folder_problems(c.folder)
    a = advise.build(camps, constraints)
    # a mesh campaign: also per pair and "for every pair"
    pa = mesh.advise_pairs(camps[0], constraints) if len(camps) == 1 else None
    if args.json:
        doc = advise.to_json(a)
        if pa is not None:
            doc["mesh"] = mesh.pair_advice_json(pa)
        print(json.dumps(doc, indent=1))
    else:
        from . import advise_view
        advise_view.print_advice(a)
        if pa is not None:
            print("\n".join(mesh.pair_advice_lines(pa)))
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
