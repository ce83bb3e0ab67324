"""`tunbench report DIR`: figures, take-aways, HTML and exports into DIR/report/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import data, export, figures, html, takeaways


@dataclass
class Report:
    html: Path
    figures: list[figures.Figure]
    takeaways: list[takeaways.Takeaway]
    csv: Path
    parquet: Path
    campaign: data.Campaign


def build(root: Path) -> Report:
    camp = data.load(root)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.png")) + list(out.glob("*.svg")):
        old.unlink()   # figures of an earlier rendering whose data may be gone
    figs = figures.render(camp, out)
    takes = takeaways.compute(camp)
    rows = export.tidy_rows(camp.cases)
    csv_path = export.write_csv(rows, out / "results.csv")
    pq_path = export.write_parquet(rows, out / "results.parquet")
    page = html.render(camp, figs, takes, out)
    return Report(page, figs, takes, csv_path, pq_path, camp)
