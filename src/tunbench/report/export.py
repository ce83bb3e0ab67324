"""Tidy exports: one row per case x metric, as CSV (always) and Parquet (pyarrow)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

# tunnel: the display name ('wireguard (go)'); impl and encrypts as the case recorded them
# (data.name_tunnels, which data.load applies); metric: the key, metric_base and dims (JSON)
# what it measures and at which point (result format v2, docs/results.md)
COLUMNS = ("case_id", "tunnel", "kind", "workload", "workload_params", "mtu", "offloads",
           "repeat", "metric", "metric_base", "dims", "unit", "value", "higher_is_better",
           "bound", "status", "impl", "encrypts")
EXTRA = ("campaign",)   # the result folder, first, in `tunbench export` (several folders)


def tidy_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every metric of every case; a case without metrics (failed) gives one row with its
    status and empty metric, so failures are visible in the export too."""
    out = []
    for d in cases:
        c = d["case"]
        base = {"case_id": c["id"], "tunnel": c["tunnel"]["label"], "kind": c["tunnel"]["kind"],
                "workload": c["workload"].get("base", c["workload"]["name"]),
                "workload_params": json.dumps(c["workload"].get("params") or {},
                                              sort_keys=True), "mtu": int(c["mtu"]),
                "offloads": c["offloads"]["name"], "repeat": int(c["repeat"]),
                "status": d.get("status", ""), "impl": c["tunnel"].get("impl"),
                "encrypts": c["tunnel"].get("encrypts")}
        metrics = d.get("metrics") or {}
        if not metrics:
            out.append({**base, "metric": None, "metric_base": None, "dims": None,
                        "unit": None, "value": None, "higher_is_better": None,
                        "bound": None})
        for name, m in metrics.items():
            v = m.get("value")
            out.append({**base, "metric": name, "metric_base": m.get("base", name),
                        # the metric's dimensions (format v2) as JSON: {"goal": "ndr", ...}
                        "dims": json.dumps(m.get("dims") or {}, sort_keys=True),
                        "unit": m.get("unit"),
                        "value": None if v is None else float(v),
                        "higher_is_better": bool(m.get("higher_is_better", True)),
                        "bound": m.get("bound")})
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
