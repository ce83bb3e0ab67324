"""The sdwan preset and chain-vs-direct, without root: the plan runs every case direct and
through the chain in each round (chain labels '<label> via chain', measured against native
direct), --scale shrinks the study's plan, and the report's chain diagram, chain-vs-direct
table and 'loss starts at' take-away are built from a real recorded campaign
(tests/data/campaigns/sdwan: `tunbench run --preset sdwan --scale 0.01` on the shared 2-core
host: IPsec libipsec gateways, WAN 100 Mbit/s)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tunbench import presets
from tunbench import spec as exp_spec
from tunbench.plan import plan
from tunbench.report import data, hops, stats, takeaways

SDWAN = Path(__file__).parent.parent / "data" / "campaigns" / "sdwan"


def test_the_preset_is_the_studys_plan() -> None:
    raw = presets.load("sdwan")
    exp = exp_spec.build(raw, "preset sdwan")
    (search,) = [w for w in exp.workloads if w.name == "loss-search"]
    p = search.params
    assert (p.method, p.resolution_pct, p.loss_threshold_pct, p.trial_duration, p.flows) == \
        ("rfc2544", 0.01, 0.1, 60.0, 100)
    assert set(p.sizes) == {"imix", "361"} and exp.duration == 60
    assert exp.chain is not None and exp.chain.direct
    kinds = [h.kind for h in exp.chain.hops]
    assert kinds == ["router", "firewall", "gateway", "wan", "gateway", "firewall", "router"]
    assert {h.params["tunnel"] for h in exp.chain.hops if h.kind == "gateway"} == {"ipsec"}


def test_every_round_runs_direct_then_through_the_chain() -> None:
    exp = exp_spec.build(presets.scale(presets.load("sdwan"), 1), "preset sdwan")
    cases = plan(exp)
    assert len(cases) == exp.repeats * 2 * len(exp.workloads)
    first = cases[:2 * len(exp.workloads)]
    assert [c.topology for c in first] == ["direct"] * 2 + ["chain"] * 2
    assert [c.tunnel.label for c in first] == ["native", "native", "native via chain",
                                               "native via chain"]
    assert first[2].case_id.endswith("-chain-r1") and first[0].case_id.endswith("-direct-r1")
    assert not first[0].through_chain and first[2].through_chain
    assert first[2].to_dict()["topology"] == "chain"


def test_a_chain_without_direct_plans_as_before() -> None:
    exp = exp_spec.build({"experiment": {"repeats": 1}, "tunnel": [{"kind": "native"}],
                          "chain": {"path": ["router"]}}, "e")
    (case,) = plan(exp)
    assert case.topology == "" and case.through_chain and "topology" not in case.to_dict()
    assert case.case_id == "0000-native-stream-mtu1500-r1"


def test_scale_shrinks_trials_repeats_and_the_resolution() -> None:
    quick = presets.scale(presets.load("sdwan"), 0.01)
    assert quick["experiment"]["duration"] == presets.MIN_DURATION
    assert quick["experiment"]["repeats"] == 1
    search = [w for w in quick["workload"] if w["name"] == "loss-search"][0]
    assert search["resolution_pct"] == 1.0
    smallest = presets.scale(presets.load("sdwan"), 0.001)
    assert [w for w in smallest["workload"] if w["name"] == "loss-search"][0][
        "resolution_pct"] == presets.MAX_QUICK_RESOLUTION_PCT == 5.0
    half = presets.scale(presets.load("sdwan"), 0.5)
    assert [w for w in half["workload"] if w["name"] == "loss-search"][0][
        "resolution_pct"] == 0.02
    full = presets.scale(presets.load("sdwan"), 1)
    assert [w for w in full["workload"] if w["name"] == "loss-search"][0][
        "resolution_pct"] == 0.01


def test_direct_is_the_reference_and_the_chain_a_share_of_it() -> None:
    c = data.load(SDWAN)
    rows = [r for r in c.rows if r.metric == "throughput"]
    by = {r.tunnel: r for r in rows}
    assert stats.is_reference(by["native"]) and not stats.is_reference(by["native via chain"])
    pct = by["native via chain"].pct_of_native
    assert pct is not None and abs(pct - 100 * by["native via chain"].stats.mean
                                   / by["native"].stats.mean) < 1e-9
    assert by["native"].pct_of_native == 100.0


def test_the_chain_diagram_names_hops_namespaces_and_the_tunnel() -> None:
    cases = data.load(SDWAN).cases
    rows = hops.diagram(cases)
    assert [r[0] for r in rows] == ["a", "rtra", "fwa", "gwa", "wan", "gwb", "fwb", "rtrb", "b"]
    gwa = rows[3]
    assert gwa[1] == "gateway" and gwa[2].endswith("-gwa")
    assert "ipsec (libipsec) tunnel to gwb, encrypts; inner MTU 1400 over WAN MTU 1500" in gwa[3]
    assert rows[4][3] == "tbf 100mbit" and "100 linear rules" in rows[2][3]
    assert hops.diagram_line(cases) == ("a -> rtra -> fwa -> gwa =ipsec (libipsec)=> wan "
                                        "=ipsec (libipsec)=> gwb -> fwb -> rtrb -> b")


def test_chain_vs_direct_and_where_loss_starts() -> None:
    cases = data.load(SDWAN).cases
    cmp = {(r["workload"], r["metric"]): r for r in hops.chain_vs_direct(cases)}
    tput = cmp[("stream", "throughput")]
    assert tput["n_direct"] == tput["n_chain"] == 1
    assert tput["chain"] < 100 < tput["direct"]          # a 100 Mbit/s WAN, libipsec
    imix = cmp[("loss-search", "rfc2544_pps_imix")]
    assert imix["bound"] == ["direct"]                    # direct hit the generator's top
    assert imix["pct"] is not None and imix["pct"] < 50
    start = hops.loss_start(cases)
    # this run: libipsec lost inside gwb (in minus out: a userspace queue, no drop counter)
    assert start is not None and start["place"] == "gwb" and start["kind"] == "gateway"
    assert start["cases"] == start["of"] == 2 and "in minus out" in start["how"]
    texts = [t.text for t in takeaways.compute(data.load(SDWAN)) if t.topic == "chain"]
    assert texts[0].startswith("Loss starts at gwb (gateway, ipsec (libipsec))")
    assert any("stream throughput is" in t and "% of direct" in t for t in texts)


def test_console_and_html_show_the_chain() -> None:
    cases = data.load(SDWAN).cases
    con = Console(record=True, width=200)
    hops.print_chain(con, cases)
    out = con.export_text()
    assert "through the chain vs direct" in out and "Loss starts at gwb" in out
    page = hops.chain_html(cases)
    assert "id=chain-diagram" in page and "chain % of direct" in page and "tb-" in page


def test_no_chain_no_section() -> None:
    assert hops.diagram([]) == [] and hops.chain_html([]) == "" and hops.takeaways([]) == []


def test_advise_measures_the_chain_against_native_direct() -> None:
    """The chain is a method ranked against native direct, not a second reference."""
    from tunbench.report import advise
    methods, _ = advise.summarize([data.load(SDWAN)])
    by = {m.label: m for m in methods}
    assert by["native"].reference and not by["native via chain"].reference
    share = by["native via chain"].share
    fig = next(iter(share.values()))
    assert fig.n == 1 and 0 < fig.est.mean < 10   # 86.7 of 4,586 Mbit/s: 1.9 %
