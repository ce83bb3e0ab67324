"""The result file format. Bump FORMAT_VERSION on any incompatible change and say so in
docs/results.md; the one reader (reader.py) refuses newer versions and upgrades older ones."""

from __future__ import annotations

from typing import Any

FORMAT_VERSION = 1
CASE_FORMAT = "tunbench-case"
INDEX_FORMAT = "tunbench-campaign"

CASE_STATUSES = ("ok", "failed", "skipped")


def case_document(*, case: dict[str, Any], status: str, started: float, ended: float,
                  testbed: dict[str, Any] | None, tunnel: dict[str, Any] | None,
                  metrics: dict[str, Any], series: dict[str, list[float]],
                  cpu: dict[str, Any] | None, counters: dict[str, Any] | None,
                  raw: dict[str, Any], notes: list[str], error: str | None,
                  error_log: str | None, offloads: dict[str, Any] | None) -> dict[str, Any]:
    assert status in CASE_STATUSES
    return {
        "format": CASE_FORMAT, "format_version": FORMAT_VERSION,
        "case": case, "status": status, "error": error, "error_log": error_log,
        "started": started, "ended": ended,
        "testbed": testbed, "tunnel": tunnel,
        "metrics": metrics, "series": series, "cpu": cpu,
        "datapath_counters": counters, "offloads": offloads,
        "raw": raw, "notes": notes,
    }

