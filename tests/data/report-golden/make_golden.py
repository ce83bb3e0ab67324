"""Write the report's tables for every recorded campaign under tests/data (each folder with an
index.json: tests/data/campaigns/*, tests/data/agg/tradeoff-campaign) into this folder, one
subfolder per campaign; tests/report/test_typed_golden.py builds them again and compares.

What is kept is what a reader gets as text, without the figures (images are not tables):

- summary.txt: the console summary `tunbench run`/`report` prints (160 columns);
- page.html: the HTML report with no figure (take-aways, result tables, chain, hub and
  trade-off tables, notes, failed cases, all cases, environment);
- rows.json: the statistics rows behind every table (report/stats.py);
- results.csv: the tidy export (report/export.py);
- advice.json: the decision summary (report/advise.py);
- compare.txt: `compare` of a few recorded pairs (--force: across setups), 100 columns.

Run from the repository root, with the tunbench of this tree first on the path:

    PYTHONPATH=src TZ=UTC .venv/bin/python tests/data/report-golden/make_golden.py

Re-run it only when a change to the report is meant to change what it shows, and say so in
the commit.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
# (A, B) compared; a pair of different setups is compared with --force, as a user would
PAIRS = (("basic", "busy"), ("encrypted", "encrypted-streams"), ("basic", "idle"),
         ("mtu", "offloads"))


def campaigns() -> list[Path]:
    """Every recorded campaign folder under tests/data, by name (unique)."""
    found = sorted(p.parent for p in DATA.rglob("index.json") if HERE not in p.parents)
    return [p for p in found if json.loads((p / "index.json").read_text()).get("format")
            == "tunbench-campaign"]


def _printed(fn: Any, *args: Any) -> str:
    """What `fn` prints to a pipe (rich: no colour; 160 columns for the summary, COLUMNS=100
    for compare)."""
    buf = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(buf):
            fn(*args)
    finally:
        if old is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = old
    return buf.getvalue()


def tables(root: Path) -> dict[str, str]:
    """The report's text for one campaign, by file name."""
    from tunbench.report import (
        advise,
        advise_view,
        console,
        data,
        export,
        headlines,
        html,
        takeaways,
    )
    from tunbench.report.build import sequential_html
    from tunbench.results import reader
    camp = data.load(root)
    advice = advise.build([camp])
    takes = takeaways.compute(camp) + headlines.stream_flips(camp)
    with tempfile.TemporaryDirectory() as tmp:
        page = html.render(camp, [], takes, Path(tmp), advise_view.section_html(advice)
                           + sequential_html(camp.index.get("sequential"))).read_text()
    summary = _printed(console.print_summary, reader.read_campaign(root).cases, root.name)
    rows = [r.to_dict() for r in camp.rows]
    return {"summary.txt": summary, "page.html": page,
            "rows.json": json.dumps(rows, indent=1, sort_keys=True, default=str) + "\n",
            "results.csv": export.to_csv(export.tidy_rows(camp.cases)),
            "advice.json": json.dumps(advise.to_json(advice), indent=1, sort_keys=True,
                                      default=str) + "\n"}


def compare_text(a: Path, b: Path) -> str:
    from tunbench.report import compare, compare_view
    res = compare.run(a, b, force=True)
    res = type(res)(Path(a.name), Path(b.name), res.changes, res.only, res.differences,
                    res.forced, res.campaigns)
    text = _printed(compare_view.print_narrow, res, 5.0)
    return text + json.dumps(compare.to_json(res, 5.0), indent=1, sort_keys=True,
                             default=str) + "\n"


def everything() -> dict[str, str]:
    """Relative path in this folder -> text (times as UTC: the caller sets TZ=UTC)."""
    out: dict[str, str] = {}
    roots = {p.name: p for p in campaigns()}
    for name, root in roots.items():
        for fname, text in tables(root).items():
            out[f"{name}/{fname}"] = text
    for a, b in PAIRS:
        out[f"compare/{a}--{b}.txt"] = compare_text(roots[a], roots[b])
    return out


def main() -> int:
    os.environ["TZ"] = "UTC"
    time.tzset()
    for rel, text in everything().items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(DATA.parent.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
