"""`tunbench trend [DB or DIR...]`: reads a results store, or result folders (imported into a
throwaway in-memory store first), and prints/writes the trend."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..store import db, query
from . import analysis


def _rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The tidy rows, and each campaign's fingerprint by its path."""
    sources = [Path(s) for s in args.sources]
    stores = [s for s in sources if s.is_file()]
    dirs = [s for s in sources if not s.is_file()]
    if not sources:   # the results store; a missing one is one line saying how to fill it
        stores = [Path(args.db) if args.db else db.default_path()]
    if not stores and not dirs:
        raise SpecError("nothing to analyse", "name a results store or result folders")
    from ..store.commands import filters_from
    f = filters_from(args)
    f.metrics = f.metrics or list(analysis.DEFAULT_METRICS)
    rows: list[dict[str, Any]] = []
    fps: dict[str, Any] = {}
    for s in stores:
        conn = db.connect(s, create=False)
        try:
            rows += query.rows(conn, f)
            fps.update(query.fingerprints(conn))
        finally:
            conn.close()
    if dirs:
        conn = db.connect(":memory:")
        try:
            db.import_many(conn, db.campaign_dirs(dirs))
            rows += query.rows(conn, f)
            fps.update(query.fingerprints(conn))
        finally:
            conn.close()
    return rows, fps


def cmd_trend(args: argparse.Namespace) -> int:
    if args.out:    # a file there, a missing parent: exit 2 before anything is read
        from ..shell import check_dir
        check_dir(Path(args.out), "--out")
    rows, fps = _rows(args)
    if not rows:
        raise SpecError("no matching cases in what was given",
                        "check --tunnel/--metric/--since, or import result folders first")
    t = analysis.build(rows, absolute=args.absolute, fingerprints=fps)
    changes = analysis.change_points(t)
    doc = analysis.to_json(t, changes)
    figs: list[Path] = []
    if args.out:
        from . import figures, page
        figs = figures.write(t, changes, Path(args.out))
        (Path(args.out) / "trend.json").write_text(json.dumps(doc, indent=1))
        figs.append(page.write(t, changes, figs, Path(args.out)))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        _print(t, changes, doc)
        for f in figs:
            print(f"  figure {f}")
    return 0


def _print(t: analysis.Trend, changes: list[analysis.Change], doc: dict[str, Any]) -> None:
    print(f"trend: {doc['campaigns']} campaign(s), {doc['cases']} case value(s)")
    hours = analysis.by_slot(t, "hour")
    for k in t.tracked():
        unit = "%" if t.views[k] == analysis.SHARE else t.units[k]
        cells = "  ".join(f"{h:02d}h {c.mean:.4g}±{c.std:.2g} (n={c.n})"
                          for h, c in hours.get(k, {}).items())
        print(f"{k[0]} {k[1]} {k[2]} [{t.views[k]}, {unit}]: {cells}")
    ser = analysis.series(t)
    split = sorted({k[:3] for k in ser if sum(1 for j in ser if j[:3] == k[:3]) > 1})
    if split:
        print(f"{len(split)} tunnel/workload/metric(s) ran in several setups: one series per "
              "setup, never compared across (setups below)")
    if not changes:
        print("no change points")
    for c in changes:
        when = datetime.fromtimestamp(c.at).strftime("%Y-%m-%d %H:%M")
        print(f"{c.verdict}: {c.tunnel} {c.workload} {c.metric} [{c.view}] "
              f"{c.before:.4g} -> {c.after:.4g} ({c.change_pct:+.1f}%) from {when} "
              f"({c.campaign}) in setup {c.setup}", file=sys.stdout)
    for sid in dict.fromkeys(c.setup for c in changes):
        print(f"setup {sid}: {t.setups[sid].label if sid in t.setups else '?'}")


def add_parsers(sub: Any) -> None:
    from ..store.commands import _filter_flags, db_flag
    t = sub.add_parser("trend", help="many campaigns by hour of day and weekday, and change "
                       "points over time (jumpavg)")
    t.add_argument("sources", nargs="*", metavar="DB|DIR", help="results store file(s) or "
                   "result folder(s) (default: the results store)")
    _filter_flags(t)
    t.add_argument("--absolute", action="store_true", help="absolute values even where "
                   "native was measured (default: %% of the campaign's native)")
    t.add_argument("--out", metavar="DIR", help="write figures (PNG, SVG) and trend.json here")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    db_flag(t)
    t.set_defaults(func=cmd_trend)
