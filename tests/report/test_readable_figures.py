"""Figures a reader can read, checked on every recorded campaign (tests/data/campaigns): no
tick label runs into its neighbour, share-of-native bars are sorted, horizontal and labelled
with their values however short, series of very different tunnels get their own scales, and
the page fits a phone (390 px) and a desktop (1280 px) in headless Chromium."""

from __future__ import annotations

import html
import io
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path

import paired_ref
import pytest
from PIL import Image

from tunbench.report import build
from tunbench.results import reader, records
from tunbench.results.model import CASE_FORMAT

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"
RECORDED = sorted(p.name for p in CAMPAIGNS.iterdir() if (p / "index.json").exists())
_TEXT = re.compile(r'<text style="font-size: (?P<size>[\d.]+)px[^"]*" x="(?P<x>[\d.-]+)" '
                   r'y="(?P<y>[\d.-]+)"[^>]*>(?P<t>[^<]*)</text>')


def _texts(svg: str) -> list[tuple[float, float, float, str]]:
    """(font px, x, y, text) of every text element of a matplotlib SVG (fonttype none)."""
    return [(float(m["size"]), float(m["x"]), float(m["y"]), html.unescape(m["t"]))
            for m in _TEXT.finditer(svg)]


@pytest.mark.parametrize("name", RECORDED)
def test_no_figure_has_overlapping_tick_labels(name: str, built: Callable[[str], build.Report],
                                               browser: Callable) -> None:
    rep = built(name)
    assert rep.figures
    crowded = {f.name: f.overlaps for f in rep.figures if f.overlaps}
    assert crowded == {}
    for width in (390, 1280):
        load = browser(rep.html, width=width)
        assert load.console_errors == [] and load.requests == []
        shot = Image.open(io.BytesIO(load.screenshot))
        # nothing widens the page past the screen: wide tables and figures scroll in place
        assert shot.width <= width, (width, shot.size)


def _shares(root: Path) -> dict[str, float]:
    """Each tunnel's share of native from the case files: the geometric mean over the rounds
    of the paired values' ratios (paired_ref)."""
    vals: dict[str, dict[int, float]] = {}
    for p in (root / "cases").glob("*.json"):
        d = reader.read_json(p, CASE_FORMAT)
        if d["status"] == "ok":
            vals.setdefault(records.identity(d["case"]["tunnel"])["display"], {})[
                d["case"]["repeat"]] = paired_ref.paired(d, "throughput")
    nat = vals["native"]
    return {t: 100 * math.exp(statistics.fmean(math.log(x / nat[r]) for r, x in v.items()))
            for t, v in vals.items()}


def test_share_of_native_bars_sorted_horizontal_and_labelled(
        built: Callable[[str], build.Report]) -> None:
    """wireguard-go and libipsec keep 2-6% of native here: their bars must still say so."""
    rep = built("encrypted")
    root = rep.html.parent.parent
    shares = _shares(root)
    assert min(shares.values()) < 10     # the case this is about
    texts = _texts((rep.html.parent / "pct-native-stream-throughput.svg").read_text())
    ticks = {t: (x, y) for _, x, y, t in texts if t in shares}
    assert set(ticks) == set(shares)
    # horizontal: the tunnel names share one x (the y axis), top to bottom by share
    assert len({round(x) for x, _ in ticks.values()}) == 1
    top_down = sorted(ticks, key=lambda t: ticks[t][1])
    assert top_down == sorted(shares, key=lambda t: -shares[t])
    for tun, pct in shares.items():
        text = f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"
        label = [(size, x, y) for size, x, y, t in texts if t.strip() == text]
        assert label, (tun, text)
        size, x, y = min(label, key=lambda v: abs(v[2] - ticks[tun][1]))
        assert size >= 7 and abs(y - ticks[tun][1]) < 5 and x > ticks[tun][0]


def test_series_get_their_own_scale_only_when_a_shared_one_flattens(
        built: Callable[[str], build.Report]) -> None:
    ecmp = {f.name: f for f in built("ecmp").figures}
    assert "own y scale" in ecmp["series-throughput-stream-1500"].caption
    basic = {f.name: f for f in built("basic").figures}   # native vs vxlan
    assert "own y scale" not in basic["series-throughput-stream-1500"].caption


def test_ndr_panels_never_mix_units(built: Callable[[str], build.Report]) -> None:
    rep = built("loss")
    titles = [t for _, _, _, t in _texts((rep.html.parent / "ndr-loss-search-1500.svg")
                                         .read_text()) if " rate, " in t]
    assert sorted(titles) == sorted(f"{k}: {w} rate, {u}" for k, w in
                                    (("NDR", "no drop"), ("PDR", "partial drop"))
                                    for u in ("packets/s", "Mbit/s"))
