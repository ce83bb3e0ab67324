"""Tidy exports: one row per case x metric, as CSV (always) and Parquet (pyarrow)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ..results.records import CaseRecord

# tunnel: the display name ('wireguard (go)'); impl and encrypts as the case recorded them
# (the typed records, results/records.py, named so); metric: the key, metric_base and dims (JSON)
# what it measures and at which point (result format v2, docs/results.md)
COLUMNS = ("case_id", "tunnel", "kind", "workload", "workload_params", "mtu", "offloads",
           "repeat", "metric", "metric_base", "dims", "unit", "value", "higher_is_better",
           "bound", "status", "impl", "encrypts")
EXTRA = ("campaign",)   # the result folder, first, in `tunbench export` (several folders)


def tidy_rows(cases: list[CaseRecord]) -> list[dict[str, Any]]:
    """Every metric of every case; a case without metrics (failed) gives one row with its
    status and empty metric, so failures are visible in the export too."""
    out = []
    for r in cases:
        base = {"case_id": r.id, "tunnel": r.tunnel.label, "kind": r.tunnel.kind,
                "workload": r.workload.base,
                "workload_params": json.dumps(r.workload.params, sort_keys=True),
                "mtu": r.mtu, "offloads": r.offloads, "repeat": r.repeat,
                "status": r.status, "impl": r.tunnel.impl, "encrypts": r.tunnel.encrypts}
        if not r.metrics:
            out.append({**base, "metric": None, "metric_base": None, "dims": None,
                        "unit": None, "value": None, "higher_is_better": None,
                        "bound": None})
        for name, m in r.metrics.items():
            out.append({**base, "metric": name, "metric_base": m.base,
                        # the metric's dimensions (format v2) as JSON: {"goal": "ndr", ...}
                        "dims": json.dumps(m.dims, sort_keys=True), "unit": m.unit,
                        "value": m.value, "higher_is_better": m.higher_is_better,
                        "bound": m.bound})
    return out


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    cols = columns(rows)
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r[k] is None else r[k]) for k in cols})
    return buf.getvalue()


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    cols = columns(rows)
    return "".join(json.dumps({k: r[k] for k in cols}) + "\n" for r in rows)


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_csv(rows), encoding="utf-8")
    return path


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    types = {"mtu": pa.int32(), "repeat": pa.int32(), "value": pa.float64(),
             "higher_is_better": pa.bool_(), "encrypts": pa.bool_()}
    cols = [c for c in (*EXTRA, *COLUMNS) if rows and c in rows[0]] or list(COLUMNS)
    schema = pa.schema([(c, types.get(c, pa.string())) for c in cols])   # the CSV's columns
    table = pa.Table.from_pylist([{k: r[k] for k in cols} for r in rows], schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """The columns of these rows, in order: `campaign` first where `tunbench export` added
    it, then COLUMNS."""
    return [c for c in EXTRA if rows and c in rows[0]] + list(COLUMNS)
