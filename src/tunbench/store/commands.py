"""`tunbench db import|query|export` and the hook that records a finished campaign. The
parsers are added to the main command line by cli.build_parser (add_parsers)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from . import db, pushgw, query


def record_finished(out: Path, db_path: str | None, pushgateway: str | None = None) -> None:
    """Record a campaign that just ended (and push it when a gateway is configured). Never
    fails the run: one warning line on stderr, and the folder can be imported later."""
    if db_path == "off" or (db_path is None and os.environ.get("TUNBENCH_DB") == "off"):
        return
    try:
        conn = db.connect(db_path)
        try:
            db.import_campaign(conn, out)
            gw = pushgateway or os.environ.get("TUNBENCH_PUSHGATEWAY")
            if gw:
                _push_campaigns(conn, gw, [str(Path(out).resolve())])
        finally:
            conn.close()
    except Exception as exc:  # the results are safe on disk; the store is an index over them
        where = db_path or os.environ.get("TUNBENCH_DB") or "(default)"
        print(f"tunbench: warning: campaign not recorded in the results store {where} "
              f"({type(exc).__name__}: {exc}); retry with `tunbench db import {out}`",
              file=sys.stderr)


def _push_campaigns(conn: Any, gateway: str, paths: list[str]) -> int:
    sent = 0
    for p in paths:
        f = query.Filters()
        rows = [r for r in query.rows(conn, f) if r["campaign"] == p]
        sent += pushgw.push(gateway, Path(p).name, rows)
    return sent


def cmd_import(args: argparse.Namespace) -> int:
    dirs = db.campaign_dirs(Path(p) for p in args.dirs)
    conn = db.connect(args.db)
    show = len(dirs) > 1 and not args.quiet

    def progress(i: int, n: int, res: db.Imported) -> None:
        if show:
            extra = f" ({res.note})" if res.note else ""
            print(f"[{i}/{n}] {res.action}: {res.path}{extra}", file=sys.stderr, flush=True)

    try:
        done = db.import_many(conn, dirs, progress)
        total = db.counts(conn)
    finally:
        conn.close()
    by: dict[str, int] = {}
    for r in done:
        by[r.action] = by.get(r.action, 0) + 1
    print(f"db: {len(done)} folder(s): " + ", ".join(f"{n} {a}" for a, n in by.items())
          + f"; {sum(r.cases for r in done)} case(s), {sum(r.metrics for r in done)} "
          f"metric row(s) written; store now holds {total['campaign']} campaign(s), "
          f"{total['case']} case(s) ({args.db or db.default_path()})")
    return 0


def filters_from(args: argparse.Namespace) -> query.Filters:
    from ..inputs import split_list

    def _csv(flag: str, text: str | None) -> list[str]:
        return split_list(flag, text) if text is not None else []
    return query.Filters(
        tunnels=_csv("--tunnel", args.tunnel), metrics=_csv("--metric", args.metric),
        workloads=_csv("--workload", getattr(args, "workload", None)),
        hosts=_csv("--host", args.host),
        since=query.parse_time(args.since, "--since") if args.since else None,
        until=query.parse_time(args.until, "--until") if args.until else None)


def cmd_query(args: argparse.Namespace) -> int:
    if args.output:   # a folder there or a missing parent: exit 2 before the query
        from ..shell import check_file
        check_file(Path(args.output), "-o")
    conn = db.connect(args.db, create=False)
    try:
        table = query.rows(conn, filters_from(args))
    finally:
        conn.close()
    query.write(table, args.format, Path(args.output) if args.output else None)
    if args.output:
        print(f"db: {len(table)} row(s) written to {args.output}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    pushgw.group_url(args.pushgateway, "check")   # bad URL: exit 2 before anything is sent
    conn = db.connect(args.db, create=False)
    try:
        f = filters_from(args)
        paths = list(dict.fromkeys(r["campaign"] for r in query.rows(conn, f)))
        if args.campaign:
            want = {str(Path(c).resolve()) for c in args.campaign}
            paths = [p for p in paths if p in want]
        sent = 0
        for p in paths:
            rows = [r for r in query.rows(conn, f) if r["campaign"] == p]
            sent += pushgw.push(args.pushgateway, Path(p).name, rows)
    finally:
        conn.close()
    print(f"db: pushed {len(paths)} campaign(s), {sent} sample(s) to {args.pushgateway}")
    return 0


def _filter_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tunnel", help="tunnel label(s) or kind(s), comma-separated")
    p.add_argument("--metric", help="metric name(s), comma-separated (e.g. throughput)")
    p.add_argument("--workload", help="workload name(s), comma-separated")
    p.add_argument("--host", help="host name(s) the campaigns ran on, comma-separated")
    p.add_argument("--since", metavar="DATE", help="cases started at or after (ISO date/time)")
    p.add_argument("--until", metavar="DATE", help="cases started before (ISO date/time)")


def db_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="FILE", help="results store (default $TUNBENCH_DB, else "
                   "~/.local/share/tunbench/results.db)")


def add_parsers(sub: Any) -> None:
    d = sub.add_parser("db", help="the results store (SQLite): import, query, export")
    dsub = d.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    im = dsub.add_parser("import", help="load result folders (idempotent)")
    im.add_argument("dirs", nargs="+", metavar="DIR", help="result folders, or folders of them")
    im.add_argument("--quiet", action="store_true", help="no per-folder progress")
    db_flag(im)
    im.set_defaults(func=cmd_import)
    q = dsub.add_parser("query", help="tidy table: one row per case x metric")
    _filter_flags(q)
    q.add_argument("--format", default="csv", help="csv (default), parquet or json (lines)")
    q.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default stdout)")
    db_flag(q)
    q.set_defaults(func=cmd_query)
    ex = dsub.add_parser("export", help="push campaigns to a Prometheus Pushgateway")
    ex.add_argument("--pushgateway", required=True, metavar="URL",
                    help="e.g. http://127.0.0.1:9091")
    ex.add_argument("--campaign", action="append", metavar="DIR",
                    help="only this campaign folder (repeatable; default: all matching)")
    _filter_flags(ex)
    db_flag(ex)
    ex.set_defaults(func=cmd_export)
