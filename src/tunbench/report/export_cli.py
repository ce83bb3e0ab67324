"""`tunbench export DIR... [--format csv|parquet|jsonl] [--out FILE|-]`: the tidy table of
result folders (one row per case x metric, report/export.py's columns with the folder first)
without building a figure; parsers added by cli.build_parser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import SpecError

FORMATS = ("csv", "parquet", "jsonl")


def cmd_export(args: argparse.Namespace) -> int:
    from ..shell import check_file
    out = None if args.out in (None, "-") else Path(args.out)
    if args.format == "parquet" and out is None:
        raise SpecError("--format parquet needs --out FILE", "Parquet is binary: e.g. "
                        "--out results.parquet")
    if out is not None:      # a folder there, a missing parent: exit 2 before any reading
        check_file(out, "--out")
    from . import data, export
    from .console import print_folder_problems
    rows: list[dict[str, Any]] = []
    for d in args.dirs:
        camp = data.load(Path(d))
        print_folder_problems(camp.folder)
        rows += [{"campaign": str(d), **r} for r in export.tidy_rows(camp.cases)]
    if args.format == "parquet":
        assert out is not None
        export.write_parquet(rows, out)
    else:
        text = export.to_csv(rows) if args.format == "csv" else export.to_jsonl(rows)
        if out is None:
            sys.stdout.write(text)
        else:
            out.write_text(text, encoding="utf-8")
    if out is not None:
        print(f"export: {len(rows)} row(s), {len(export.columns(rows))} columns, to {out}",
              file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    e = sub.add_parser("export", help="the tidy table of result folders (one row per case x "
                       "metric) as CSV, Parquet or JSON lines, without building figures")
    e.add_argument("dirs", nargs="+", metavar="DIR", help="result folder(s) (with index.json)")
    e.add_argument("--format", choices=FORMATS, default="csv",
                   help="csv (default), parquet (needs --out FILE) or jsonl (one object per "
                   "line)")
    e.add_argument("--out", metavar="FILE|-", help="write to FILE (default: stdout, '-')")
    e.set_defaults(func=cmd_export)
