"""`tunbench advise` ranks on every figure a campaign measured (issue 28 point 5): every
recorded campaign in tests/data gives a ranking or one clear line; throughput at the best
stream count, NDR/PDR/RFC 2544 packets/s per frame size, latency added p99, at any MTU or
offload variant measured, and chains (their gateways count); the constraints --need
encryption, --carries, --max-added-p99, --kernel-only, read from the tunnel drivers'
declarations; a figure or constraint the campaign did not measure refused in one line naming
what to run (exit 2, through cli.main; one ranking through the real CLI). Figures recomputed
from the case files."""

from __future__ import annotations

import ast
import html
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import paired_ref
import pytest

import cli_inproc
from tunbench import tunnels
from tunbench.errors import SpecError
from tunbench.report import advise, advise_view, data
from tunbench.report.advise import Constraints
from tunbench.report.advise_names import BY, CARRIES

DATA = Path(__file__).parent.parent / "data"
CAMPAIGNS = DATA / "campaigns"
RECORDED = sorted(p.parent for p in (*CAMPAIGNS.glob("*/index.json"),
                                     *DATA.glob("agg/*/index.json")))
TB = [sys.executable, "-m", "tunbench"]


def _advice(name: str, **k: object) -> advise.Advice:
    return advise.build([data.load(CAMPAIGNS / name)], Constraints(**k))  # type: ignore[arg-type]


def _method(a: advise.Advice, label: str) -> advise.Method:
    return next(m for m in a.methods if m.label == label)


def _docs(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((CAMPAIGNS / name / "cases").glob("*.json"))]


def _one_line(a: advise.Advice) -> bool:
    return bool(a.verdict) and "\n" not in a.verdict


def _scenarios(root: Path) -> list[tuple[int, str]]:
    return sorted({(m, o) for _, m, o in data.load(root).scenarios()})


# -- every recorded campaign ---------------------------------------------------------------------

def test_every_recorded_campaign_is_here() -> None:
    names = {p.name for p in RECORDED}
    assert {"loss", "mtu", "offloads", "sdwan", "kinds", "chain", "tradeoff-campaign"} <= names
    assert len(RECORDED) >= 17


@pytest.mark.parametrize("root", RECORDED, ids=lambda p: p.name)
def test_every_recorded_campaign_ranks_or_says_one_line(root: Path) -> None:
    """By default, on every recorded campaign: the methods ranked (the figure ranked by
    measured for each of them), or a verdict of one line saying why not; every figure in the
    JSON a number with its CI inside the positive range for shares."""
    a = advise.build([data.load(root)])
    assert _one_line(a)
    others = [m for m in a.methods if not m.reference]
    assert len(a.ranked) + len(a.excluded) == len(others)
    assert a.ranked or a.verdict.startswith(("No method meets", "Nothing to rank"))
    assert [r for r, _, _ in a.ranked] == sorted(r for r, _, _ in a.ranked)
    doc = json.loads(json.dumps(advise.to_json(a)))
    assert doc["format_version"] == 3 and doc["constraints"]["by"] in BY
    # both renderings: the console (every row, the verdict) and the report's first section
    from rich.console import Console
    con = Console(record=True, width=200)
    advise_view.print_advice(a, con)
    text = con.export_text()
    assert " ".join(a.verdict.split()) in " ".join(text.split())
    assert all(m.label in text for m in a.methods)
    assert html.escape(a.verdict, quote=True) in advise_view.section_html(a)
    for r in doc["ranking"]:
        assert isinstance(r["mean"], float) and r["n"] >= 1
        assert (r["ci_low"] is None) == (r["n"] < 2)


@pytest.mark.parametrize("root", RECORDED, ids=lambda p: p.name)
def test_every_figure_on_every_variant_ranks_or_is_refused_in_one_line(root: Path) -> None:
    """Each `--by` figure at each (MTU, offloads) variant the campaign measured: a ranking or
    one verdict line, or one SpecError line naming what to run (never a traceback)."""
    camp = data.load(root)
    ranked_by = set()
    for mtu, off in _scenarios(root):
        for by in BY:
            try:
                a = advise.build([camp], Constraints(prefer=by, mtu=mtu, offloads=off))
            except SpecError as exc:
                line = exc.one_line()
                assert "\n" not in line and line.startswith(f"--by {by}: "), line
                assert exc.hint.startswith("run ") and "tunbench run" in exc.hint, line
                continue
            assert _one_line(a) and a.variant == (mtu, off)
            if a.ranked:
                ranked_by.add(by)
    assert ranked_by, f"{root.name}: no figure ranks at all"


# -- each new figure, on the campaign that has it ------------------------------------------------

def test_throughput_at_each_methods_best_stream_count() -> None:
    a = _advice("encrypted-streams", prefer="throughput-best")
    assert a.basis == "share of native throughput at its best stream count"
    for _, m, fig in a.ranked:
        best = max((1, 4, 16), key=lambda n: m.share[n].est.mean)
        recorded = m.label.split(" (")[0]
        want = list(paired_ref.log_ratios(CAMPAIGNS / "encrypted-streams", recorded,
                                          "throughput", streams=best).values())
        assert (fig.est.mean, fig.est.ci_low, fig.est.ci_high) == \
            pytest.approx(paired_ref.share(want))
    means = [f.est.mean for _, _, f in a.ranked]
    assert means == sorted(means, reverse=True)


@pytest.mark.parametrize("goal", ["ndr", "pdr", "rfc2544"])
@pytest.mark.parametrize("size", ["361", "imix"])
def test_loss_search_rates_rank_per_frame_size(goal: str, size: str) -> None:
    """loss: NDR/PDR/RFC 2544 packets/s of vxlan and srv6 as % of native's at each frame size,
    from the case files (one round each: untested, one shared rank, never a winner)."""
    docs = {d["case"]["tunnel"]["label"]: d["metrics"] for d in _docs("loss")}
    nat = docs["native"][f"{goal}_pps_{size}"]["value"]
    a = _advice("loss", prefer=goal, frame_size=size)
    assert a.basis.endswith(f"at frame size {size}") and a.frame_size == size
    want = {t: 100 * m[f"{goal}_pps_{size}"]["value"] / nat for t, m in docs.items()
            if t != "native" and (m.get(f"{goal}_pps_{size}") or {}).get("value")}
    got = {m.label: f.est.mean for _, m, f in a.ranked}
    assert got == pytest.approx(want)
    assert list(got) == sorted(want, key=lambda t: -want[t])
    assert all(f.untested for _, _, f in a.ranked) and {r for r, _, _ in a.ranked} == {1}
    for _, why in a.excluded:       # a size a method's search did not reach
        assert why == [f"no {a.basis} measured"]
    doc = advise.to_json(a)
    vx = next(s for s in doc["summary"] if s["method"] == "vxlan")
    assert vx["loss_search_pps_share"][goal][size]["mean"] == pytest.approx(want["vxlan"])


def test_loss_search_is_the_default_when_nothing_else_was_measured() -> None:
    a = _advice("loss")
    assert a.constraints.prefer == "ndr" and a.frame_size == "361" and len(a.ranked) == 2
    assert "measured once each (untested)" in a.verdict


def test_latency_added_p99_ranks_in_its_own_order() -> None:
    """latency: by p99 added, wireguard-go (2.9 ms) before IPsec (3.2 ms), although IPsec
    adds less at p50: each figure its own ranking, recomputed round by round."""
    docs = [d for d in _docs("latency") if d["status"] == "ok"]
    nat = {d["case"]["repeat"]: d["metrics"]["tcp_rtt_p99"]["value"] for d in docs
           if d["case"]["tunnel"]["kind"] == "native"}
    want: dict[str, list[float]] = {}
    for d in docs:
        t = d["case"]["tunnel"]
        if t["kind"] != "native":
            want.setdefault(t["label"], []).append(
                d["metrics"]["tcp_rtt_p99"]["value"] - nat[d["case"]["repeat"]])
    a = _advice("latency", prefer="latency-p99")
    got = {m.label.split(" (")[0]: f.est.mean for _, m, f in a.ranked}
    assert got == pytest.approx({t: statistics.fmean(v) for t, v in want.items()})
    assert [m.label.split(" (")[0] for _, m, _ in a.ranked] == sorted(want, key=lambda t:
                                                                      statistics.fmean(want[t]))
    p50 = [m.label for _, m, _ in _advice("latency", prefer="latency").ranked]
    assert p50 != [m.label for _, m, _ in a.ranked]


@pytest.mark.parametrize("name,variant", [("mtu", {"mtu": 9000}),
                                          ("offloads", {"offloads": "no-tso-gro"})])
def test_a_measured_mtu_or_offload_variant_is_ranked(name: str, variant: dict) -> None:
    """--mtu 9000 / --offloads no-tso-gro: the figures of that variant only, paired round by
    round against native in the same variant, and the MTU left at that underlay MTU."""
    a = _advice(name, **variant)
    mtu, off = variant.get("mtu", 1500), variant.get("offloads", "default")
    assert a.variant == (mtu, off)
    docs = [d for d in _docs(name) if d["case"]["mtu"] == mtu
            and d["case"]["offloads"]["name"] == off]
    nat = {d["case"]["repeat"]: paired_ref.paired(d, "throughput") for d in docs
           if d["case"]["tunnel"]["kind"] == "native"}
    logs = [math.log(paired_ref.paired(d, "throughput") / nat[d["case"]["repeat"]])
            for d in docs if d["case"]["tunnel"]["kind"] == "vxlan"]
    vx = _method(a, "vxlan")
    assert (vx.share[1].est.mean, vx.share[1].est.ci_low, vx.share[1].est.ci_high) == \
        pytest.approx(paired_ref.share(logs))
    assert vx.mtu_left == min(d["tunnel"]["mtu"] for d in docs
                              if d["case"]["tunnel"]["kind"] == "vxlan")
    default = _method(_advice(name), "vxlan")
    assert default.share[1].est.mean != pytest.approx(vx.share[1].est.mean)
    assert [m.label for _, m, _ in a.ranked] == ["vxlan"]


def test_a_chain_counts_its_gateways() -> None:
    """sdwan: native through a chain whose gateways run IPsec (libipsec) encrypts (it was
    listed as "does not encrypt"), is not kernel-only (libipsec is userspace), carries what
    IPsec carries; ranked by its RFC 2544 rate too."""
    a = _advice("sdwan", need_encryption=True)
    via = _method(a, "native via chain")
    assert via.encrypts and via.gateways == "ipsec (libipsec)" and via.gateway_encrypts
    assert [m.label for _, m, _ in a.ranked] == ["native via chain"] and not a.excluded
    assert advise_view.rows(a)[1][1] == ("yes", "gateways: ipsec (libipsec)")
    k = _advice("sdwan", kernel_only=True)
    assert k.excluded == [(_method(k, "native via chain"),
                           ["its gateways' datapath (ipsec (libipsec)) runs in userspace"])]
    assert via.carries == tunnels.get("ipsec").carries
    r = _advice("sdwan", prefer="rfc2544", frame_size="imix", need_encryption=True)
    docs = {(d["case"]["tunnel"]["label"], d["case"]["workload"]["name"]): d["metrics"]
            for d in _docs("sdwan")}
    want = 100 * docs[("native via chain", "loss-search")]["rfc2544_pps_imix"]["value"] / \
        docs[("native", "loss-search")]["rfc2544_pps_imix"]["value"]
    assert r.ranked[0][2].est.mean == pytest.approx(want)
    js = next(s for s in advise.to_json(a)["summary"] if s["method"] == "native via chain")
    assert js["gateways"] == {"tunnel": "ipsec (libipsec)", "encrypts": True,
                              "kernel_datapath": False}


def test_chain_campaign_ranks_ndr_at_its_jumbo_mtu() -> None:
    a = _advice("chain", prefer="ndr")
    assert a.variant == (9000, "default") and a.frame_size == "8000"
    assert [m.label for _, m, _ in a.ranked] == ["vxlan"]


# -- constraints ---------------------------------------------------------------------------------

def test_ssh_forward_is_a_tcp_relay() -> None:
    """ssh-forward carries TCP only (its driver declares it): its MTU cell says so instead of
    "65536", --carries udp and --min-mtu exclude it, each with its reason."""
    a = _advice("encrypted")
    fwd = _method(a, "ssh-forward")
    assert fwd.relay and fwd.carries == tunnels.get("ssh-forward").carries == ("tcp",)
    assert fwd.mtu_left is None
    row = advise_view.rows(a)[[m.label for m in advise_view.ordered(a)].index("ssh-forward")]
    assert row[2] == ("n/a (TCP relay)", "")
    assert advise.to_json(a)["summary"][1]["relay"] is True
    u = _advice("encrypted", carries=("udp",))
    assert [(m.label, why) for m, why in u.excluded] == \
        [("ssh-forward", ["carries TCP only (a TCP port relay)"])]
    assert {m.label for _, m, _ in u.ranked} == {"wireguard (go)", "ipsec (libipsec)"}
    mtu = _advice("encrypted", min_mtu=1400)
    assert [(m.label, why) for m, why in mtu.excluded] == \
        [("ssh-forward", ["a TCP relay: carries no packets, so it leaves no MTU"])]


def test_carries_l2_and_kernel_only_follow_the_drivers() -> None:
    """kinds: vxlan and ovs-vxlan carry Ethernet frames, wireguard and IPsec do not; with
    --kernel-only the userspace datapaths (ovs netdev, wireguard-go, libipsec) go."""
    a = _advice("kinds", carries=("l2",))
    assert {m.label for _, m, _ in a.ranked} == {"vxlan", "ovs-vxlan (netdev)"}
    assert {m.label: why for m, why in a.excluded} == {
        "wireguard (go)": ["does not carry Ethernet frames (L2)"],
        "ipsec (libipsec)": ["does not carry Ethernet frames (L2)"]}
    k = _advice("kinds", kernel_only=True)
    assert [m.label for _, m, _ in k.ranked] == ["vxlan"]
    assert all(why == ["its datapath runs in userspace"] for _, why in k.excluded)
    for m in k.methods:
        drv = tunnels.get(m.kind)
        assert m.kernel == drv.kernel_datapath(m.impl)
        assert m.carries == drv.carries


def test_max_added_p99_keeps_the_methods_under_the_budget() -> None:
    a = _advice("latency", max_added_p99=3000.0)
    p99 = {m.label: m.latency["p99"].est.mean for m in a.methods if not m.reference}
    assert {m.label for _, m, _ in a.ranked} == {t for t, v in p99.items() if v <= 3000}
    assert {m.label for m, _ in a.excluded} == {t for t, v in p99.items() if v > 3000} == \
        {"ipsec (libipsec)"}
    assert a.excluded[0][1] == [f"latency added p99 {advise._n(p99['ipsec (libipsec)'])} µs > "
                                "3000 µs"]
    assert "latency added p99 ≤ 3000 µs" in a.constraints.describe()


def test_drivers_declare_what_they_carry_and_report_keeps_no_list() -> None:
    """Every driver's `carries` is drawn from CARRIES (TCP always) and its `userspace` names
    its own implementations; report/advise*.py name no tunnel kind (no hand-kept list)."""
    kinds = set(tunnels.registry())
    for kind, drv in tunnels.registry().items():
        assert set(drv.carries) <= set(CARRIES) and "tcp" in drv.carries, kind
        assert set(drv.userspace) <= {"", *drv.implementations()}, kind
    report = Path(advise.__file__).parent
    for src in report.glob("advise*.py"):
        consts = {n.value for n in ast.walk(ast.parse(src.read_text()))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not (consts & (kinds - {"native"})), (src.name, consts & kinds)


# -- refusals through the command line (cli.main in this process: cli_inproc), and one ranking
# -- through the real `python -m tunbench advise` -------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_inproc.tunbench("advise", *args)


def _real_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TB, "advise", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name,args,says", [
    ("kinds", ["--by", "ndr"], ["--by ndr", "measured no NDR", "tunbench run --workloads "
                                "loss-search"]),
    ("kinds", ["--by", "latency-p99"], ["--by latency-p99", "tunbench run --workloads latency"]),
    ("kinds", ["--max-added-p99", "200"], ["--max-added-p99 200", "measured no latency",
                                           "--workloads latency"]),
    ("latency", ["--max-cpu-per-gbit", "30"], ["--max-cpu-per-gbit 30", "no CPU per Gbit/s",
                                               "--workloads stream"]),
    ("latency", ["--by", "throughput-best"], ["--by throughput-best", "parallel-streams"]),
    ("mtu", ["--mtu", "4000"], ["--mtu 4000", "1500, 9000", "tunbench run --mtu 4000"]),
    ("offloads", ["--offloads", "all-off"], ["--offloads all-off", "default, no-tso-gro",
                                             "tunbench run --offloads all-off"]),
    ("loss", ["--frame-size", "64"], ["--frame-size 64", "361, imix", "--sizes 64"]),
])
def test_unmeasured_figure_or_constraint_is_one_line_exit_2(name: str, args: list[str],
                                                            says: list[str]) -> None:
    res = _cli(str(CAMPAIGNS / name), *args)
    assert res.returncode == 2, (args, res.stdout, res.stderr)
    assert res.stdout == "" and res.stderr.count("\n") == 1
    assert res.stderr.startswith("tunbench: ")
    for s in says:
        assert s in res.stderr, (s, res.stderr)


def test_cli_ranks_a_loss_search_in_json() -> None:
    res = _real_cli(str(CAMPAIGNS / "loss"), "--by", "pdr", "--frame-size", "imix", "--carries",
               "udp", "--kernel-only", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["format"] == "tunbench-advice" and doc["format_version"] == 3
    assert doc["constraints"]["by"] == "pdr" and doc["constraints"]["frame_size"] == "imix"
    assert doc["constraints"]["carries"] == ["udp"] and doc["constraints"]["kernel_only"]
    assert doc["variant"] == {"mtu": 1500, "offloads": "default"}
    assert doc["basis"] == "PDR packets/s as share of native at frame size imix"
    assert [r["method"] for r in doc["ranking"]] == ["vxlan"]
    assert doc["ranking"][0]["decision"] == "untested" and doc["ranking"][0]["n"] == 1


def test_a_campaign_with_no_rankable_figure_says_so_in_one_line() -> None:
    """The methods of kinds with their figures taken away (as a campaign of another workload
    would have them): one line naming what to run, not "no method meets the constraints"."""
    methods, notes = advise.summarize([data.load(CAMPAIGNS / "kinds")])
    for m in methods:
        m.share, m.cpu, m.cpu_abs, m.latency, m.loss = {}, {}, {}, {}, {}
    a = advise.advise(methods, Constraints(), notes)
    assert a.ranked == [] and _one_line(a)
    assert a.verdict.startswith("Nothing to rank: the campaign measured none of the figures")
    assert "stream, latency or loss-search workload" in a.verdict
