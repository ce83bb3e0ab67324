"""`tunbench db query`: tidy tables (one row per case x metric, with its campaign and host)
that pandas reads as they are (read_csv / read_parquet / read_json(lines=True))."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import SpecError

COLUMNS = ("campaign", "campaign_name", "host", "kernel", "campaign_created", "case_id",
           "tunnel", "kind", "impl", "encrypts", "workload", "workload_params", "mtu",
           "offloads", "repeat", "rate", "status", "started", "metric", "unit", "value",
           "higher_is_better", "bound")
FORMATS = ("csv", "parquet", "json")
DEFAULT_NAME = "campaign"   # spec.Experiment's name when the experiment gives none

_SELECT = """
SELECT c.path, c.name, c.host, e.kernel, c.created, k.case_id, k.tunnel, k.kind, k.impl,
       k.encrypts, k.workload, k.workload_params, k.mtu, k.offloads, k.repeat, k.rate,
       k.status, k.started, m.name, m.unit, m.value, m.higher_is_better, m.bound
FROM campaign c JOIN environment e ON e.campaign_id = c.id
JOIN "case" k ON k.campaign_id = c.id JOIN metric m ON m.case_row = k.id
"""


@dataclass
class Filters:
    tunnels: list[str] = field(default_factory=list)    # label or kind
    metrics: list[str] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    since: float | None = None
    until: float | None = None
    ok_only: bool = True


def parse_time(text: str, flag: str) -> float:
    """An ISO date or date-time (local time unless it says otherwise) as epoch seconds."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise SpecError(f"{flag} {text!r} is not a date", "e.g. 2026-11-02 or "
                        "2026-11-02T08:00") from None


def _in(column: str, values: list[str]) -> tuple[str, list[Any]]:
    return f"{column} IN ({','.join('?' * len(values))})", list(values)


def where(f: Filters) -> tuple[str, list[Any]]:
    parts: list[str] = []
    args: list[Any] = []
    if f.tunnels:
        q = ",".join("?" * len(f.tunnels))
        parts.append(f"(k.tunnel IN ({q}) OR k.kind IN ({q}))")
        args += f.tunnels * 2
    for col, vals in (("m.name", f.metrics), ("k.workload", f.workloads), ("c.host", f.hosts)):
        if vals:
            sql, a = _in(col, vals)
            parts.append(sql)
            args += a
    if f.since is not None:
        parts.append("k.started >= ?")
        args.append(f.since)
    if f.until is not None:
        parts.append("k.started < ?")
        args.append(f.until)
    if f.ok_only:
        parts.append("k.status = 'ok'")
    return (" WHERE " + " AND ".join(parts)) if parts else "", args


def rows(conn: sqlite3.Connection, f: Filters) -> list[dict[str, Any]]:
    sql, args = where(f)
    cur = conn.execute(_SELECT + sql + " ORDER BY k.started, c.path, k.case_id, m.name", args)
    out = []
    for r in cur:
        d = dict(zip(COLUMNS, r, strict=True))
        d["campaign_name"] = display_name(d["campaign_name"], d["campaign"])
        for b in ("encrypts", "higher_is_better"):
            d[b] = None if d[b] is None else bool(d[b])
        out.append(d)
    return out


def fingerprints(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Each campaign's fingerprint (results/fingerprint.py) by its path: the recorded one,
    else derived from its experiment and environment as compare derives it."""
    from ..results import fingerprint
    out = {}
    for path, fp, exp, env in conn.execute(
            "SELECT c.path, c.fingerprint, c.experiment, e.env FROM campaign c "
            "JOIN environment e ON e.campaign_id = c.id"):
        out[str(path)] = (json.loads(fp) if fp else fingerprint.derive(
            json.loads(exp or "{}"), json.loads(env or "{}")))
    return out


def display_name(name: str | None, path: str) -> str:
    """The campaign's name: its experiment's name, or its folder's where the experiment
    kept the default ("campaign" names nothing)."""
    return name if name and name != DEFAULT_NAME else Path(path).name


def iso(t: float | None) -> str | None:
    """Epoch seconds as an ISO-8601 local date-time with its offset (what --since takes)."""
    if t is None:
        return None
    return datetime.fromtimestamp(float(t)).astimezone().isoformat(timespec="seconds")


def readable(r: dict[str, Any]) -> dict[str, Any]:
    """A row as db query shows it: times as ISO-8601 (trend keeps the epoch seconds)."""
    return {**r, "campaign_created": iso(r["campaign_created"]), "started": iso(r["started"])}


def write(table: list[dict[str, Any]], fmt: str, out: Path | None) -> None:
    """CSV or JSON lines to a file or stdout; Parquet (binary) only to a file."""
    if fmt not in FORMATS:
        raise SpecError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}",
                        "e.g. --format csv")
    table = [readable(r) for r in table]
    if fmt == "parquet":
        if out is None:
            raise SpecError("--format parquet needs -o FILE", "Parquet is binary: "
                            "e.g. -o trend.parquet")
        import pyarrow as pa
        import pyarrow.parquet as pq
        cols = {c: [r[c] for r in table] for c in COLUMNS}
        pq.write_table(pa.table(cols), str(out))
        return
    buf = io.StringIO()
    if fmt == "csv":
        w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(table)
    else:
        for r in table:
            buf.write(json.dumps(r) + "\n")
    if out is None:
        sys.stdout.write(buf.getvalue())
    else:
        out.write_text(buf.getvalue())
