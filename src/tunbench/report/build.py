"""`tunbench report DIR`: figures, take-aways, HTML and exports into DIR/report/."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import advise, advise_view, data, export, figures, headlines, html, takeaways


@dataclass
class Report:
    html: Path
    figures: list[figures.Figure]
    takeaways: list[takeaways.Takeaway]
    csv: Path
    parquet: Path
    campaign: data.Campaign
    advice: advise.Advice | None = None


def build(root: Path, constraints: advise.Constraints | None = None) -> Report:
    """`constraints`: the options of `tunbench advise` given to `tunbench report`; the
    decision summary and its ranking open the page and are written to advice.json."""
    camp = data.load(root)
    advice = advise.build([camp], constraints)   # a bad --streams: refused before writing
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.png")) + list(out.glob("*.svg")):
        old.unlink()   # figures of an earlier rendering whose data may be gone
    figs = figures.render(camp, out)
    takes = takeaways.compute(camp) + headlines.stream_flips(camp)
    (out / "advice.json").write_text(json.dumps(advise.to_json(advice), indent=1) + "\n")
    rows = export.tidy_rows(camp.cases)
    csv_path = export.write_csv(rows, out / "results.csv")
    pq_path = export.write_parquet(rows, out / "results.parquet")
    page = html.render(camp, figs, takes, out, advise_view.section_html(advice))
    return Report(page, figs, takes, csv_path, pq_path, camp, advice)
