"""`tunbench schedule add|list|remove|run`; parsers added by cli.build_parser, which also hands
over what this module needs of the CLI above it (never imported from here): `parse_run`
(argv after `--` -> the `tunbench run` namespace), `spec_from_args` (that namespace -> the
experiment, validating it) and `install_signal_handlers`."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import SpecError
from . import fire, spec, systemd

ParseRun = Callable[[list[str]], argparse.Namespace]


def _run_args(raw: list[str], parse_run: ParseRun,
              spec_from_args: Callable[[argparse.Namespace], object]) -> list[str]:
    """The `tunbench run` options after `--`, validated now (exit 2/3 before anything is
    saved or installed), without --out/--resume (the schedule names each campaign)."""
    args = list(raw)
    if not args:
        raise SpecError("no run options after --", "e.g. tunbench schedule add NAME --every "
                        "3h -- --tunnels native,wireguard")
    bad = [a for a in args if a.split("=")[0] in ("--out", "--resume", "--db")]
    if bad:
        raise SpecError(f"{bad[0]} cannot be a scheduled run option",
                        "the schedule names each campaign: use --results DIR / --db FILE "
                        "on schedule add")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parse_run(args)
    except SystemExit:
        why = (err.getvalue().strip().splitlines() or [""])[-1].split("error: ")[-1]
        raise SpecError(f"invalid run options after --: {why}",
                        "they are tunbench run's options, e.g. -- --tunnels native "
                        "--duration 5") from None
    spec_from_args(ns)
    return args


def _schedule(args: argparse.Namespace) -> spec.Schedule:
    every = spec.parse_duration(args.every, "--every")
    low = spec.min_interval()
    if every < low:
        raise SpecError(f"--every {args.every} is shorter than the minimum {low:g}s",
                        "a campaign needs time to run; e.g. --every 30m")
    return spec.Schedule(
        name=spec.check_name(args.name), every=every, run_args=_run_args(args.run_args, args.parse_run, args.spec_from_args),
        results=str(Path(args.results).resolve()),
        window=spec.parse_window(args.window) if args.window else None,
        days=spec.parse_days(args.days) if args.days else list(spec.DAYS),
        until=spec.parse_until(args.until) if args.until else None,
        slip=spec.parse_duration(args.slip, "--slip") if args.slip else 0.0,
        db=args.db or os.environ.get("TUNBENCH_DB"), created=time.time())


def _say(f: fire.Firing) -> None:
    when = datetime.fromtimestamp(f.slot).strftime("%Y-%m-%d %H:%M:%S")
    what = f.campaign or ""
    print(f"schedule: {when} {f.status} {what} {f.reason}".rstrip(), file=sys.stderr,
          flush=True)


def cmd_add(args: argparse.Namespace) -> int:
    s = _schedule(args)
    if spec.path_of(s.name).exists() and not args.replace:
        raise SpecError(f"schedule {s.name!r} exists", "remove it first, or add --replace")
    if s.expired(time.time()):
        raise SpecError("--until is already past", "choose a later date")
    if not args.foreground and not args.no_timer:
        why = systemd.systemd_missing()
        if why:
            raise SpecError(f"cannot install a systemd timer: {why}",
                            f"run it in the foreground: tunbench schedule add {s.name} "
                            "--foreground ...")
    path = spec.save(s)
    if args.no_timer:
        print(f"schedule {s.name}: {s.describe()}; saved in {path} (no timer: fire it with "
              f"tunbench schedule run {s.name}, or --foreground)")
        return 0
    if args.foreground:
        print(f"schedule {s.name}: {s.describe()}; saved in {path}; running in the "
              "foreground (Ctrl-C stops it)", file=sys.stderr)
        return _foreground(s, args.runs, args.install_signal_handlers)
    units = systemd.install(s)
    print(f"schedule {s.name}: {s.describe()}; timer {units[0]}")
    return 0


def _foreground(s: spec.Schedule, runs: int | None,
                install_signal_handlers: Callable[[], None]) -> int:
    install_signal_handlers()
    done = fire.foreground(s, runs=runs, report=_say)
    return 1 if done and all(f.status == fire.FAILED for f in done) else 0


def cmd_run(args: argparse.Namespace) -> int:
    s = spec.load(args.name)
    if args.foreground:
        return _foreground(s, args.runs, args.install_signal_handlers)
    args.install_signal_handlers()
    f = fire.fire(s, time.time(), slip=not args.no_slip)
    _say(f)
    return 1 if f.status == fire.FAILED else 0


def cmd_list(args: argparse.Namespace) -> int:
    names = spec.names()
    if not names:
        print(f"no schedules ({spec.schedules_dir()})")
    for n in names:
        s = spec.load(n)
        print(f"{n}: {s.describe()}; run {' '.join(s.run_args)}; {systemd.timer_state(n)}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    path = spec.path_of(args.name)
    if not path.exists():
        raise SpecError(f"no schedule named {args.name!r}", "tunbench schedule list shows them")
    removed = systemd.remove(args.name)
    path.unlink()
    (spec.schedules_dir() / f"{args.name}.lock").unlink(missing_ok=True)
    print(f"schedule {args.name} removed" + (f" ({', '.join(removed)})" if removed else ""))
    return 0


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("schedule", help="recurring campaigns (systemd timer, or foreground)")
    ss = s.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    a = ss.add_parser("add", help="NAME --every 3h [...] -- <tunbench run options>",
                      epilog="Everything after -- is given to tunbench run for every "
                      "campaign, e.g. -- --tunnels native,wireguard --duration 30")
    a.add_argument("name", metavar="NAME")
    a.add_argument("--every", required=True, help="period: 30m, 3h, 1d")
    a.add_argument("--window", metavar="HH:MM-HH:MM", help="only start in this time of day "
                   "(local; may wrap midnight)")
    a.add_argument("--days", help="only on these days: mon-fri, sat,sun (default every day)")
    a.add_argument("--until", metavar="DATE", help="no run starts after (a date: that whole day)")
    a.add_argument("--slip", help="random delay 0..SLIP of each start, e.g. 10m")
    a.add_argument("--results", default="results", metavar="DIR",
                   help="campaigns go to DIR/NAME/<timestamp> (default results/)")
    a.add_argument("--db", metavar="FILE", help="results store (default $TUNBENCH_DB, else "
                   "~/.local/share/tunbench/results.db)")
    a.add_argument("--foreground", action="store_true", help="no systemd timer: run the "
                   "schedule in this process until --until or Ctrl-C")
    a.add_argument("--runs", type=int, metavar="N", help="with --foreground: stop after N "
                   "campaigns")
    a.add_argument("--no-timer", action="store_true", help="only save the schedule: fire it "
                   "with `tunbench schedule run NAME` (cron, by hand) or --foreground later")
    a.add_argument("--replace", action="store_true", help="replace a schedule of that name")
    a.set_defaults(func=cmd_add, run_args=[], parse_run=sub.parse_run,
                   spec_from_args=sub.spec_from_args,
                   install_signal_handlers=sub.install_signal_handlers)
    r = ss.add_parser("run", help="fire a saved schedule once now (what its timer runs), or "
                      "--foreground: keep firing it")
    r.add_argument("name", metavar="NAME")
    r.add_argument("--foreground", action="store_true")
    r.add_argument("--runs", type=int, metavar="N", help="with --foreground: stop after N")
    r.add_argument("--no-slip", action="store_true", help="start now (systemd already "
                   "applied RandomizedDelaySec)")
    r.set_defaults(func=cmd_run, install_signal_handlers=sub.install_signal_handlers)
    ls = ss.add_parser("list", help="saved schedules and their timers")
    ls.set_defaults(func=cmd_list)
    rm = ss.add_parser("remove", help="stop and delete a schedule (its results stay)")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=cmd_remove)
