"""tunbench command line: a thin layer over spec -> runner -> results -> report.

Errors become one line and an exit code here, and only here; tracebacks with --debug.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from . import __version__, interrupts, spec, tunnels, workloads
from .errors import Interrupted, SpecError, TunbenchError
from .report import console

DEFAULT_OUT = Path("results")


_MAIN_PID = 0
_LAST_SIGNUM = signal.SIGINT


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _LAST_SIGNUM
    if os.getpid() != _MAIN_PID:
        # A forked helper (pyroute2 opens namespace sockets from a child) inherits this
        # handler; it must die as by default, never run tunbench's code on.
        os._exit(128 + signum)
    if signum != signal.SIGALRM:
        _LAST_SIGNUM = signal.Signals(signum)
    interrupts.mark(_LAST_SIGNUM.name)
    raise Interrupted(_LAST_SIGNUM.name)


def _unraisable(u: Any) -> None:
    """A signal that lands while Python runs an at-fork callback (logging registers one; the
    pyroute2 netns helpers fork often) raises Interrupted where Python can only print and
    ignore it: the campaign would go on. Deliver it again a moment later, from a one-shot
    timer, when the main code runs."""
    if isinstance(u.exc_value, Interrupted) and os.getpid() == _MAIN_PID:
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        return
    sys.__unraisablehook__(u)


def install_signal_handlers() -> None:
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt)
    sys.unraisablehook = _unraisable


def available_kinds() -> dict[str, list[str]]:
    """kind -> list of reasons it cannot run here with its default params (empty: available;
    an automatically chosen implementation runs if any does)."""
    return {kind: [] if auto.available else auto.reasons
            for kind in sorted(tunnels.registry())
            for auto in tunnels.availability(kind)[:1]}


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def spec_from_args(args: argparse.Namespace) -> spec.Experiment:
    from . import presets
    data: dict[str, Any] = {}
    source = "command line"
    if args.experiment and args.preset:
        raise SpecError("--experiment and --preset are exclusive",
                        "copy the preset (tunbench list shows its path) and edit it")
    if args.experiment:
        data = spec.load_toml(Path(args.experiment))
        source = str(args.experiment)
    elif args.preset:
        data = presets.load(args.preset)
        source = f"preset {args.preset}"
    if args.scale is not None:
        data = presets.scale(data, args.scale)
        source += f" (scale {args.scale:g})"
    over: dict[str, Any] = {"experiment": {}}
    e = over["experiment"]
    if args.noisy_cv is not None:
        e["noisy_cv"] = args.noisy_cv
    if args.offloads:
        over["offloads"] = spec.offload_tables(args.offloads)
    for key in ("duration", "warmup", "repeats", "rate", "seed") + spec.NETEM_KEYS:
        val = getattr(args, key)
        if val is not None:
            e[key] = val
    if args.mtu:
        try:
            e["mtus"] = [int(m) for m in _csv(args.mtu)]
        except ValueError:
            raise SpecError(f"--mtu {args.mtu!r} is not a list of integers",
                            "e.g. --mtu 1500 or --mtu 1500,9000") from None
    if args.shuffle:
        e["order"] = "shuffled"
    if args.tunnels:
        over["tunnel"] = [{"kind": k} for k in _csv(args.tunnels)]
    if args.workloads:
        over["workload"] = [{"name": w} for w in _csv(args.workloads)]
    _site_overrides(args, data, over)
    merged = spec.merge(data, over)
    kinds = available_kinds()
    avail = {k for k, why in kinds.items() if not why}
    return spec.build(merged, source, available=avail)


def _site_overrides(args: argparse.Namespace, data: dict[str, Any],
                    over: dict[str, Any]) -> None:
    """--site a=USER@HOST --site b=... (and --ssh-config) replace the file's [sites]."""
    sites: dict[str, Any] | None = None
    for item in getattr(args, "site", None) or []:
        name, eq, target = item.partition("=")
        if not eq or not target:
            raise SpecError(f"--site {item!r} is not NAME=TARGET",
                            "e.g. --site a=root@gw1 --site b=root@gw2 (or b=local)")
        sites = sites or {}
        if name in sites:
            raise SpecError(f"--site {name} given twice", "give each of a and b once")
        sites[name] = target
    if getattr(args, "ssh_config", None):
        sites = sites or dict(data.get("sites") or {})
        sites["ssh_config"] = args.ssh_config
    if sites is not None:
        over["sites"] = sites


def cmd_run(args: argparse.Namespace) -> int:
    from .runner import run_campaign
    if args.resume:
        out = Path(args.resume)
        from .results.store import CampaignStore
        index = CampaignStore(out).read_index()
        exp = spec.build(_spec_dict(index["experiment"]), index["experiment"]["source"])
    else:
        exp = spec_from_args(args)
        out = Path(args.out) if args.out else DEFAULT_OUT / time.strftime("%Y%m%d-%H%M%S")
    install_signal_handlers()
    from .report.live import ProgressReporter
    reporter = ProgressReporter(quiet=args.quiet)   # stderr, also with --json
    try:
        outcome = run_campaign(exp, out, reporter, resume=bool(args.resume))
    finally:
        reporter.close()
    cases = outcome.store.read_cases()
    from .report import stats
    if args.json:
        print(json.dumps(stats.summary_json(cases, str(out), exp.noisy_cv), indent=1))
    else:
        console.print_summary(cases, str(out), noisy_cv=exp.noisy_cv)
    if not args.no_report:
        _report_after_run(out, quiet=args.quiet)
    return 1 if outcome.failed and len(outcome.failed) == len(outcome.statuses) else 0


def _report_after_run(out: Path, quiet: bool) -> None:
    """The HTML report of the run just finished; a failure here never fails the run."""
    from .report import build
    try:
        rep = build.build(out)
    except Exception as exc:  # the results are safe on disk; say why there is no report
        print(f"tunbench: report not written ({type(exc).__name__}: {exc}); "
              f"retry with `tunbench report {out}`", file=sys.stderr)
        return
    if not quiet:
        print(f"report: {rep.html} ({len(rep.figures)} figures)", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    from .report import build, export
    rep = build.build(Path(args.dir))
    if args.csv:
        sys.stdout.write(rep.csv.read_text())
        return 0
    print(f"report: {rep.html}")
    for f in rep.figures:
        print(f"  figure {f.name}: {f.title}")
    for t in rep.takeaways:
        print(f"  - {t.text}")
    print(f"  exports: {rep.csv}, {rep.parquet} ({len(export.COLUMNS)} columns)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .report import compare, data
    a, b = Path(args.a), Path(args.b)
    changes, only = compare.compare(data.load(a), data.load(b))
    if args.json:
        print(json.dumps(compare.to_json(a, b, changes, only, args.threshold), indent=1))
    else:
        compare.print_table(a, b, changes, only, args.threshold)
    return 1 if compare.regressions(changes, args.threshold) else 0


def _spec_dict(recorded: dict[str, Any]) -> dict[str, Any]:
    """The spec dict that rebuilds a recorded experiment (for --resume)."""
    exp: dict[str, Any] = {k: recorded[k] for k in (
        "repeats", "duration", "warmup", "mtus", "order", "seed", "family", "name",
        "cpu_interval", "noisy_cv") if k in recorded}
    for key in ("rate",) + spec.NETEM_KEYS:
        if recorded.get(key):
            exp[key] = recorded[key]
    return {
        "experiment": exp,
        "tunnel": [{"kind": t["kind"], "label": t["label"], **t["params"]}
                   for t in recorded["tunnels"]],
        "workload": [{"name": w["name"], "label": w.get("label") or w["name"], **w["params"],
                      **({"mtus": w["mtus"]} if w.get("mtus") else {})}
                     for w in recorded["workloads"]],
        "offloads": [{"name": o["name"], **o["settings"]} for o in recorded["offloads"]],
        **({"sites": {**{n: {k: v for k, v in site.items() if v}
                         for n, site in recorded["sites"].items()},
                      **({"ssh_config": recorded["ssh_config"]}
                         if recorded.get("ssh_config") else {})}}
           if recorded.get("sites") else {}),
    }


def cmd_list(args: argparse.Namespace) -> int:
    from . import presets
    kinds = available_kinds()
    if args.json:
        print(json.dumps({
            "tunnels": {k: {"available": not why, "missing": why,
                            "summary": tunnels.get(k).summary,
                            "encrypts": tunnels.get(k).encrypts,
                            "implementations": {
                                str(r.impl): {"display": r.display, "available": r.available,
                                              "missing": r.reasons}
                                for r in tunnels.availability(k)[1:]},
                            "params": tunnels.get(k).Params().to_dict()}
                        for k, why in kinds.items()},
            "workloads": {n: {"summary": w.summary, "params": w.Params().to_dict(),
                              "missing": [m.one_line() for m in w.requirements(w.Params())]}
                          for n, w in sorted(workloads.registry().items())},
            "presets": {n: {"summary": presets.describe(n), "path": presets.path(n)}
                        for n in presets.names()},
            "offload_variants": spec.OFFLOAD_PRESETS}, indent=1))
        return 0
    console.print_list(kinds, show_params=args.params)
    console.print_presets({n: (presets.describe(n), presets.path(n)) for n in presets.names()},
                          spec.OFFLOAD_PRESETS)
    return 0


def _ssh_options(args: argparse.Namespace) -> Any:
    from .remote.transport import SshOptions
    cfg = getattr(args, "ssh_config", None)
    return SshOptions(config_file=Path(os.path.expanduser(cfg)) if cfg else None)


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor
    if args.site:
        from .remote import sitecheck
        sdoc = sitecheck.report(args.site, _ssh_options(args))
        print(json.dumps(sdoc, indent=1) if args.json else sitecheck.format_table(sdoc))
        return 0
    doc = doctor.report(probe=args.probe)
    print(json.dumps(doc, indent=1) if args.json else doctor.format_table(doc))
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from .capabilities import root_missing
    from .testbed import ledger, local
    m = root_missing()
    if m:
        raise TunbenchError(m.why, m.fix)
    if args.site:   # a remote host: its agent sweeps the journals crashed agents left there
        from .remote import sitecheck
        swept = sitecheck.cleanup(args.site, _ssh_options(args))
        for line in swept:
            print(f"removed on {args.site}: {line}")
        print(f"cleanup {args.site}: {len(swept)} leftover object(s) removed" if swept else
              f"cleanup {args.site}: nothing left over")
        return 0
    done = ledger.replay_journals() + local.sweep()
    for line in done:
        print(f"removed {line}")
    print(f"cleanup: {len(done)} leftover object(s) removed" if done else
          "cleanup: nothing left over")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tunbench", description="Benchmark tunnels and "
                                "encryption between two sites: throughput, latency, CPU.")
    p.add_argument("--version", action="version", version=f"tunbench {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a campaign and write a result folder")
    r.add_argument("--tunnels", help="comma-separated kinds, or 'all' (every kind available "
                   "here); default: native,vxlan")
    r.add_argument("--workloads", help="comma-separated workloads; default: stream")
    r.add_argument("--experiment", metavar="FILE", help="TOML experiment file (flags override)")
    r.add_argument("--preset", metavar="NAME", help="a shipped experiment (tunbench list shows "
                   "them): single-stream, latency, parallel-streams, line-rate-processes, "
                   "jumbo, study")
    r.add_argument("--scale", type=float, metavar="F", help="multiply the preset's/file's "
                   "durations and repeats by F for a quick run (e.g. 0.05; minimum 2 s, 1 repeat)")
    r.add_argument("--offloads", metavar="VARIANTS", help="offload variants, comma-separated "
                   "(default, no-tso-gro, no-gso-gro, no-tnl-seg, gro-on, all-off): every case "
                   "runs once per variant, ethtool -K on underlay and tunnel devices")
    r.add_argument("--noisy-cv", type=float, metavar="CV", help="flag figures whose coefficient "
                   "of variation exceeds CV (default 0.10)")
    r.add_argument("--duration", type=float, help="seconds per measurement (default 10)")
    r.add_argument("--warmup", type=float, help="seconds excluded at the start (default 1)")
    r.add_argument("--repeats", type=int, help="repeats of every case (default 3)")
    r.add_argument("--mtu", help="underlay MTU(s), comma-separated (default 1500)")
    r.add_argument("--rate", help="shape the underlay with tbf, e.g. 500mbit")
    r.add_argument("--delay", help="netem delay on both underlay ends, e.g. 25ms")
    r.add_argument("--jitter", help="netem jitter (needs --delay), e.g. 5ms")
    r.add_argument("--loss", help="netem random loss on both underlay ends, e.g. 0.1%%")
    r.add_argument("--netem-rate", dest="netem_rate", help="netem rate limit, e.g. 100mbit")
    r.add_argument("--site", action="append", metavar="NAME=TARGET",
                   help="run between real hosts over SSH: --site a=USER@HOST --site "
                   "b=USER@HOST ('local' = this host); default: two namespaces here")
    r.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                   help="ssh config file for the sites (ssh -F; default ~/.ssh/config)")
    r.add_argument("--shuffle", action="store_true", help="shuffle case order within a round")
    r.add_argument("--seed", type=int, help="seed for --shuffle")
    r.add_argument("--out", help="result folder (default results/<timestamp>)")
    r.add_argument("--resume", metavar="DIR", help="continue an interrupted campaign")
    r.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    r.add_argument("--quiet", action="store_true", help="no progress on stderr (it is shown "
                   "otherwise, also with --json)")
    r.add_argument("--no-report", action="store_true",
                   help="do not write the HTML report (DIR/report/) after the run")
    r.set_defaults(func=cmd_run)

    rp = sub.add_parser("report", help="figures, HTML report and CSV/Parquet of a result "
                        "folder, into DIR/report/")
    rp.add_argument("dir", metavar="DIR", help="result folder (with index.json)")
    rp.add_argument("--csv", action="store_true",
                    help="also print the tidy CSV (one row per case x metric) to stdout")
    rp.set_defaults(func=cmd_report)

    cp = sub.add_parser("compare", help="change per tunnel and metric from campaign A to B; "
                        "exit 1 on a significant regression beyond --threshold")
    cp.add_argument("a", metavar="A", help="result folder: before")
    cp.add_argument("b", metavar="B", help="result folder: after")
    cp.add_argument("--threshold", type=float, default=0.0, metavar="PCT",
                    help="ignore regressions smaller than PCT percent of A's mean (default 0)")
    cp.add_argument("--json", action="store_true", help="print one JSON object")
    cp.set_defaults(func=cmd_compare)

    ls = sub.add_parser("list", help="tunnel kinds and workloads, and whether each runs here")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--params", action="store_true", help="show parameters and defaults")
    ls.set_defaults(func=cmd_list)

    d = sub.add_parser("doctor", help="what this host can run and exactly why not (read-only)")
    d.add_argument("--json", action="store_true")
    d.add_argument("--probe", action="store_true", help="build a throwaway testbed to read the "
                   "underlay's offloads (needs root; torn down at once)")
    d.add_argument("--site", metavar="USER@HOST", help="check a remote host over SSH instead")
    d.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                   help="ssh config file (ssh -F; default ~/.ssh/config)")
    d.set_defaults(func=cmd_doctor)

    c = sub.add_parser("cleanup", help="remove leftovers of crashed runs (tb- objects only)")
    c.add_argument("--site", metavar="USER@HOST", help="sweep a remote host over SSH instead "
                   "(what crashed tunbench agents left in its /run/tunbench)")
    c.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                   help="ssh config file (ssh -F; default ~/.ssh/config)")
    c.set_defaults(func=cmd_cleanup)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except TunbenchError as exc:
        if args.debug:
            raise
        print(f"tunbench: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tunbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
