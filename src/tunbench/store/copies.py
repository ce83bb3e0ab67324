"""Copies of a recorded campaign folder moved in time: every timestamp (index created and
finished, each case's started and ended) shifted so the campaign starts at a chosen moment,
and optionally only some of its cases kept. For tests and benchmarks of the store and trend,
which need many campaigns with known times built from real recorded cases; the source folder
is never changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def retimed(src: Path, dst: Path, start: float, *, keep: set[str] | None = None,
            scale: dict[str, float] | None = None) -> Path:
    """Write a copy of campaign `src` to `dst` starting at epoch `start`. `keep`: case ids to
    keep (default all); `scale`: metric name -> factor applied to its value (a synthetic
    step on top of real values)."""
    index = json.loads((src / "index.json").read_text())
    shift = start - float(index["created"])
    index["created"] = start
    if index.get("finished"):
        index["finished"] = float(index["finished"]) + shift
    if keep is not None:
        index["cases"] = [c for c in index["cases"] if c["id"] in keep]
    (dst / "cases").mkdir(parents=True, exist_ok=True)
    for c in index["cases"]:
        doc: dict[str, Any] = json.loads((src / c["file"]).read_text())
        for k in ("started", "ended"):
            if doc.get(k):
                doc[k] = float(doc[k]) + shift
        for name, f in (scale or {}).items():
            m = (doc.get("metrics") or {}).get(name)
            if m and m.get("value") is not None:
                m["value"] = float(m["value"]) * f
        (dst / c["file"]).write_text(json.dumps(doc))
    (dst / "index.json").write_text(json.dumps(index))
    return dst
