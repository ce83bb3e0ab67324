"""The decision summary and `tunbench advise`, recomputed from campaigns recorded by a real
`tunbench run` (tests/data/campaigns) under several constraint sets; the report's first
screen in headless Chromium."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

import paired_ref
import pytest
from scipy import stats as sps

import cli_inproc
from tunbench.errors import SpecError
from tunbench.report import advise, build, data, headlines, takeaways
from tunbench.report.advise import Constraints

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"


def _docs(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((CAMPAIGNS / name / "cases").glob("*.json"))]


def _per_round(name: str, label: str, metric: str, streams: int, op: str) -> list[float]:
    """Straight from the case files: each round's ln(value / native's in that round)
    (op "ratio") or value minus native's (op "diff"), for the cases of `label` (the recorded
    label) at `streams` streams."""
    if op == "ratio":
        return list(paired_ref.log_ratios(CAMPAIGNS / name, label, metric,
                                          streams=streams).values())
    docs = [d for d in _docs(name) if d["status"] == "ok"]
    nat = {d["case"]["repeat"]: d["metrics"][metric]["value"] for d in docs
           if d["case"]["tunnel"]["kind"] == "native" and metric in d["metrics"]}
    return [d["metrics"][metric]["value"] - nat[d["case"]["repeat"]] for d in docs
            if d["case"]["tunnel"]["label"] == label and metric in d["metrics"]]


def _ci(v: list[float]) -> tuple[float, float]:
    m, s = statistics.fmean(v), statistics.stdev(v)
    h = sps.t.ppf(0.975, len(v) - 1) * s / len(v) ** 0.5
    return m - h, m + h


def _advice(*names: str, **k: object) -> advise.Advice:
    return advise.build([data.load(CAMPAIGNS / n) for n in names], Constraints(**k))  # type: ignore[arg-type]


def _method(a: advise.Advice, label: str) -> advise.Method:
    return next(m for m in a.methods if m.label == label)


def test_summary_recomputed_from_the_case_files() -> None:
    """Every figure of the summary equals what the case files give, round by round on the log
    scale: shares at 1 and at the best stream count (geometric mean of the rounds' ratios,
    asymmetric 95% CI), CPU per Gbit/s × native, MTU left, encrypts, n; JSON numbers only."""
    a = _advice("encrypted-streams")
    assert [m.label for m in a.methods] == ["native", "wireguard (go)", "ipsec (libipsec)"]
    assert _method(a, "native").reference
    for label, recorded, mtu in (("wireguard (go)", "wireguard", 1440),
                                 ("ipsec (libipsec)", "ipsec", 1400)):
        m = _method(a, label)
        assert m.encrypts and m.mtu_left == mtu
        means = {}
        for n in (1, 4, 16):
            want = _per_round("encrypted-streams", recorded, "throughput", n, "ratio")
            fig = m.share[n]
            assert len(want) == fig.n == 2
            ref = paired_ref.share(want)
            assert (fig.est.mean, fig.est.ci_low, fig.est.ci_high) == pytest.approx(ref)
            assert 0 < fig.est.ci_low < fig.est.mean < fig.est.ci_high
            means[n] = fig.est.mean
            cpu = _per_round("encrypted-streams", recorded, "cpu_per_gbit", n, "ratio")
            assert m.cpu[n].est.mean == pytest.approx(paired_ref.share(cpu, 1.0)[0])
        assert m.single() is not None and m.single()[0] == 1
        best = max(means, key=lambda n: means[n])
        assert m.best() is not None and m.best()[0] == best
    row = next(r for r in advise.to_json(a)["summary"] if r["method"] == "wireguard (go)")
    assert row["share_best"]["streams"] == 4 and row["encrypts"] is True
    single = row["share_single"]
    for key in ("mean", "ci_low", "ci_high"):
        assert isinstance(single[key], float) and single[key] > 0
    assert single["n"] == 2 and single["decision"] in ("different", "equivalent", "undecided")
    assert "confidence" not in single


def test_latency_added_is_per_round_difference_and_ranks_by_default() -> None:
    """A campaign with only latency: latency added p50/p99 against native's per round, and
    the ranking falls back on it (nothing else to rank by)."""
    a = _advice("latency")
    for label, recorded in (("vxlan", "vxlan"), ("wireguard (go)", "wireguard")):
        m = _method(a, label)
        for q in ("p50", "p99"):
            want = _per_round("latency", recorded, f"tcp_rtt_{q}", 1, "diff")
            assert m.latency[q].est.mean == pytest.approx(statistics.fmean(want))
            assert (m.latency[q].est.ci_low, m.latency[q].est.ci_high) == \
                pytest.approx(_ci(want))
            assert m.latency[q].n == 2
    assert a.constraints.prefer == "latency-p50" and a.basis == "latency added (p50)"
    order = [m.label for _, m, _ in a.ranked]
    p50 = {m.label: m.latency["p50"].est.mean for m in a.methods if not m.reference}
    assert order == sorted(p50, key=lambda t: p50[t])


def test_a_50x_gap_is_never_called_a_tie() -> None:
    """kinds (n = 2): vxlan at ~88 % of native, the userspace methods at ~2 %. Two rounds
    cannot settle vxlan against ovs-vxlan with Holm over three neighbours (t with 1 degree
    of freedom), so the verdict says undecided and how many rounds would settle it, never
    "indistinguishable"; the pair's own numbers are checked by hand."""
    a = _advice("kinds")
    assert [m.label for _, m, _ in a.ranked][:2] == ["vxlan", "ovs-vxlan (netdev)"]
    d = a.decisions[1]
    assert d is not None and d.verdict == "undecided" and d.rounds_needed == 1
    vx = paired_ref.log_ratios(CAMPAIGNS / "kinds", "vxlan", "throughput")
    ovs = paired_ref.log_ratios(CAMPAIGNS / "kinds", "ovs-vxlan", "throughput")
    diffs = [vx[r] - ovs[r] for r in vx]
    assert d.mean == pytest.approx(statistics.fmean(diffs))
    assert d.p == pytest.approx(sps.ttest_1samp(diffs, 0.0).pvalue)
    assert d.p_holm is not None and d.p_holm >= d.p > 0.05 / 3
    assert "indistinguishable" not in a.verdict
    assert a.verdict.startswith("No winner yet by share of native throughput")
    assert "undecided, about 1 more round (--repeats 3, or no --repeats" in a.verdict
    doc = advise.to_json(a)
    second = doc["ranking"][1]
    assert second["against_previous"]["decision"] == "undecided"
    assert second["against_previous"]["rounds_needed"] == 1
    assert all(isinstance(r["mean"], float) and r["ci_low"] > 0 for r in doc["ranking"])


def test_top_two_within_three_points_are_equivalent() -> None:
    """wireguard and ipsec at one stream: 2.7 % and 2.6 % of native, within ±3 points (TOST
    on the log scale at their level): one rank, and the verdict calls them equivalent."""
    a = _advice("encrypted-streams", need_encryption=True)
    wg = _per_round("encrypted-streams", "wireguard", "throughput", 1, "ratio")
    ip = _per_round("encrypted-streams", "ipsec", "throughput", 1, "ratio")
    diffs = [x - y for x, y in zip(wg, ip, strict=True)]
    level = math.exp((statistics.fmean(wg) + statistics.fmean(ip)) / 2)
    delta = 2 * math.asinh(0.03 / (2 * level))
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    t = sps.t.ppf(0.95, len(diffs) - 1)
    assert -delta < statistics.fmean(diffs) - t * se and statistics.fmean(diffs) + t * se < delta
    assert [r for r, _, _ in a.ranked] == [1, 1]
    assert a.decisions[1] is not None and a.decisions[1].verdict == "equivalent"
    assert a.verdict.startswith("No winner by")
    assert "are equivalent (within ±3 points of native)" in a.verdict


def test_constraints_exclude_every_method_with_reasons() -> None:
    a = _advice("kinds", need_encryption=True, min_mtu=1450)
    assert a.ranked == []
    why = {m.label: reasons for m, reasons in a.excluded}
    assert why == {"vxlan": ["does not encrypt"],
                   "wireguard (go)": ["leaves MTU 1440 < 1450"],
                   "ipsec (libipsec)": ["leaves MTU 1400 < 1450"],
                   "ovs-vxlan (netdev)": ["does not encrypt"]}
    assert a.verdict.startswith("No method meets the constraints: all 4 are excluded")


def test_cpu_budget_against_native_keeps_only_the_cheap_method() -> None:
    """--max-cpu-per-gbit 2x: the userspace datapaths need tens of times native's CPU per
    Gbit/s here; vxlan (kernel) stays, alone, so it is named without a contest."""
    a = _advice("kinds", max_cpu=2.0, max_cpu_relative=True)
    assert [m.label for _, m, _ in a.ranked] == ["vxlan"]
    assert a.verdict == "vxlan is the only method meeting the constraints."
    for m, why in a.excluded:
        x = m.cpu[1].est.mean
        assert x > 2 and why == [f"CPU per Gbit/s {advise._n(x)}× native > 2× native"]
    # the same budget in absolute terms: % of one core per Gbit/s, as the tables show it
    vx = _method(a, "vxlan").cpu_abs[1].est.mean
    b = _advice("kinds", max_cpu=vx * 1.01)
    assert [m.label for _, m, _ in b.ranked] == ["vxlan"]


def test_streams_option_ranks_at_that_count_and_refuses_an_unmeasured_one() -> None:
    a = _advice("encrypted-streams", streams=16)
    assert a.streams == 16 and a.basis.endswith("at 16 stream(s)")
    shares = {m.label: m.share[16].est.mean for m in a.methods if not m.reference}
    assert [m.label for _, m, _ in a.ranked] == sorted(shares, key=lambda t: -shares[t])
    with pytest.raises(SpecError, match=r"--streams 8: no throughput case ran with 8 "
                       r"stream\(s\) \(measured: 1, 4, 16\)"):
        _advice("encrypted-streams", streams=8)


def test_single_runs_are_untested_never_ranked_apart() -> None:
    a = _advice("v1-impls", prefer="cpu")
    assert all(f.untested for _, _, f in a.ranked) and {r for r, _, _ in a.ranked} == {1}
    assert "untested" in a.verdict
    ranking = advise.to_json(a)["ranking"]
    assert all(r["decision"] == "untested" and r["n"] == 1 and r["ci_low"] is None
               for r in ranking)
    assert all(r["against_previous"]["decision"] == "untested" for r in ranking[1:])


def test_campaigns_pool_round_by_round() -> None:
    """Two campaigns given together: a method's per-round shares are the union of each
    campaign's (each against its own native), so n adds up."""
    a = _advice("encrypted-streams", "kinds")
    wg = _method(a, "wireguard (go)").share[1]
    want = (_per_round("encrypted-streams", "wireguard", "throughput", 1, "ratio")
            + _per_round("kinds", "wireguard", "throughput", 1, "ratio"))
    assert wg.n == 4
    assert (wg.est.mean, wg.est.ci_low, wg.est.ci_high) == pytest.approx(paired_ref.share(want))
    assert any("2 campaigns pooled" in n for n in a.notes)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`tunbench ARGS` in this process (cli_inproc); test_advise_figures.py's refusals run
    the real command line."""
    return cli_inproc.tunbench(*args)


def test_cli_json_and_one_line_refusals(tmp_path: Path) -> None:
    res = _cli("advise", str(CAMPAIGNS / "kinds"), "--need", "encryption", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["format"] == "tunbench-advice" and doc["constraints"]["need"] == ["encryption"]
    assert [e["method"] for e in doc["excluded"]] == ["vxlan", "ovs-vxlan (netdev)"]
    assert {r["method"] for r in doc["ranking"]} == {"wireguard (go)", "ipsec (libipsec)"}
    for args, names in (
        (["--streams", "4"], ["--streams 4", "measured: 1"]),
        (["--min-mtu", "70000"], ["--min-mtu 70000"]),
        (["--max-cpu-per-gbit", "nan"], ["--max-cpu-per-gbit"]),
        (["--prefer", "speed"], ["--prefer"]),
        ([str(CAMPAIGNS / "kinds")], ["same result folder is given twice"]),
        ([str(tmp_path)], [str(tmp_path), "has no index.json"]),
    ):
        res = _cli("advise", str(CAMPAIGNS / "kinds"), *args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("tunbench: ")
        for n in names:
            assert n in res.stderr, (args, res.stderr)


def test_takeaways_cut_to_a_handful_with_the_caveat_once() -> None:
    c = data.load(CAMPAIGNS / "v1-impls")
    takes = takeaways.compute(c)
    h = headlines.select(takes, limit=2)
    assert len(h.top) + len(h.rest) == len(takes)
    per: dict[str, int] = {}
    for t in h.top:
        per[headlines.group(t)] = per.get(headlines.group(t), 0) + 1
    assert max(per.values()) <= 2
    imp = [headlines.importance(t) for t in h.top]
    assert imp == sorted(imp, reverse=True)
    assert any("one run each" in t.text.lower() for t in takes)   # the recorded sentences
    assert not any("one run each" in t.text.lower() for t in h.top + h.rest)
    assert h.caveats == [headlines.SINGLE_CAVEAT]


def test_ranking_flip_with_stream_count_is_a_takeaway() -> None:
    c = data.load(CAMPAIGNS / "encrypted-streams")
    flips = headlines.stream_flips(c)
    a = advise.build([c])
    wg, ip = _method(a, "wireguard (go)"), _method(a, "ipsec (libipsec)")
    flipped = (wg.share[1].est.mean > ip.share[1].est.mean) != (
        wg.share[16].est.mean > ip.share[16].est.mean)
    assert bool(flips) == flipped
    for t in flips:
        assert t.facts["streams"] == (1, 16)
        assert t.facts["significant"] is False and "not significant" in t.text


def test_report_opens_with_the_decision(campaign: Callable[[str], Path],
                                        browser: Callable) -> None:
    """The first screen (1280x900) of the report shows the decision summary with its verdict
    and table; the take-aways follow with the full list folded."""
    root = campaign("kinds")
    rep = build.build(root, Constraints(need_encryption=True))
    assert json.loads((root / "report" / "advice.json").read_text())["verdict"] == \
        rep.advice.verdict
    probe = ("(()=>{const d=document.getElementById('decision');const r=d.getBoundingClientRect();"
             "const t=d.querySelector('table').getBoundingClientRect();"
             "return {top:r.top,tableTop:t.top,tableBottom:t.bottom,text:d.innerText,"
             "folded:!document.getElementById('all-takeaways').open,"
             "first:document.querySelector('h2').innerText}})()")
    load = browser(rep.html, probe=probe)
    assert not load.console_errors and not load.requests
    p = load.probe
    assert p["first"] == "Decision summary"
    assert p["top"] < 300 and p["tableBottom"] <= 900, p
    assert rep.advice.verdict in p["text"]
    assert "excluded" not in p["text"].lower() or "does not encrypt" in p["text"]
    assert "wireguard (go)" in p["text"] and "1440" in p["text"]
    assert p["folded"]
    assert load.scroll_width <= load.client_width
    phone = browser(rep.html, width=390, mobile=True)   # one card per method, no sideways scroll
    assert phone.scroll_width <= phone.client_width
    assert rep.advice.verdict in phone.text


def test_nothing_to_rank() -> None:
    """Native alone: nothing to rank, said so. (A loss-search campaign ranks by its NDR
    packets/s: test_advise_figures.py.)"""
    methods, notes = advise.summarize([data.load(CAMPAIGNS / "basic")])
    alone = advise.advise([m for m in methods if m.reference], Constraints(), notes)
    assert alone.ranked == [] and alone.excluded == []
    assert alone.verdict == "Nothing to rank: the campaign measured no method besides native."
