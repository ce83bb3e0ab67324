"""`tunbench report DIR`: figures, take-aways, HTML and exports into DIR/report/."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    page = html.render(camp, figs, takes, out, advise_view.section_html(advice)
                       + sequential_html(camp.index.get("sequential")))
    return Report(page, figs, takes, csv_path, pq_path, camp, advice)


def sequential_html(seq: dict[str, Any] | None) -> str:
    """Under the decision summary of a sequential campaign: how many rounds, why it stopped,
    and each pair still open with the rounds it needs (sequential.py)."""
    if not seq:
        return ""
    from ..sequential import summary_lines
    first, *rest = summary_lines(seq)
    items = "".join(f"<li>{advise_view.esc(line.removeprefix('unsettled: '))}</li>"
                    for line in rest if line.startswith("unsettled: "))
    apart = "".join(f"<p class=meta>{advise_view.esc(line[0].upper() + line[1:])}.</p>"
                    for line in rest if not line.startswith("unsettled: "))
    return ("<section class=decision id=sequential><p class=meta>"
            f"{advise_view.esc(first[0].upper() + first[1:])}.</p>" + apart
            + (f"<p><b>Unsettled</b></p><ul class=unsettled>{items}</ul>" if items else "")
            + "</section>")
