"""RTT and loss as campaign axes (testbed/wanaxis.py), the pure pieces: `rtt` / `loss` lists
and their flags, the one-line refusals (a kernel without netem among them, exit 2 before
anything changes), the netem of each case (half the RTT on each end; 0 = none), the plan
(every method at each scenario in the same round, native first), to_dict and --resume, the
naming of a case's scenario (results/records.py) and the distance section with the Mathis
model (report/distance.py).

The kernel questions go through capabilities.viewing, as the chain tests do for SRv6: a kernel
built with netem (the VM lab's Debian kernel has it as a module) and this host's own kernel,
which is asked for real where the refusal is tested."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunbench import capabilities, cli, plan, spec
from tunbench.errors import SpecError
from tunbench.report import distance
from tunbench.results import records
from tunbench.testbed import wanaxis
from tunbench.testbed.netem import Netem

NO_NETEM = wanaxis.kernel_missing() is not None


class WithNetem:
    """A kernel built with netem as a module (the VM lab's Debian 6.1 kernel has it so)."""

    where, release = "the VM lab guest", "6.1.0-netem"

    def kernel_config(self) -> dict[str, str]:
        return {"CONFIG_NET_SCH_NETEM": "m"}

    def has_tool(self, tool: str) -> bool:
        return True


@pytest.fixture
def netem_kernel() -> Iterator[None]:
    with capabilities.viewing(WithNetem()):
        yield


def _exp(exp: dict[str, Any], **more: Any) -> spec.Experiment:
    data: dict[str, Any] = {"experiment": {"repeats": 2, **exp},
                            "tunnel": [{"kind": "vxlan"}, {"kind": "native"}],
                            "workload": [{"name": "stream"}], **more}
    return spec.build(data, "f.toml")


def _refused(exp: dict[str, Any], **more: Any) -> str:
    with pytest.raises(SpecError) as err:
        _exp(exp, **more)
    return str(err.value.message)


# ---- the setting -------------------------------------------------------------------------
@pytest.mark.usefixtures("netem_kernel")
def test_axes_are_read_and_recorded() -> None:
    e = _exp({"rtt": ["0ms", "20ms", "80ms"], "loss": ["0%", "0.1%"]})
    assert e.rtts == ("0ms", "20ms", "80ms") and e.losses == ("0%", "0.1%")
    assert e.netem is None   # the axes set netem per case, not for the campaign
    d = e.to_dict()
    assert d["rtt"] == ["0ms", "20ms", "80ms"] and d["loss"] == ["0%", "0.1%"]
    assert e.shaped
    plain = _exp({})
    assert plain.rtts == plain.losses == () and "rtt" not in plain.to_dict()
    assert not plain.shaped


@pytest.mark.usefixtures("netem_kernel")
def test_a_loss_string_is_still_one_loss_for_every_case() -> None:
    e = _exp({"loss": "0.1%", "rtt": ["0ms", "20ms"]})
    assert e.losses == () and e.netem == Netem(loss="0.1%")
    assert e.to_dict()["loss"] == "0.1%"
    assert e.case_netem("20ms", "") == Netem(delay="10ms", loss="0.1%")
    assert e.case_netem("0ms", "") == Netem(loss="0.1%")


@pytest.mark.usefixtures("netem_kernel")
@pytest.mark.parametrize("exp, msg", [
    ({"rtt": "20ms"}, 'f.toml: experiment.rtt must be a non-empty list like ["0ms", "20ms", '),
    ({"rtt": []}, "f.toml: experiment.rtt must be a non-empty list"),
    ({"rtt": ["20"]}, "f.toml: experiment.rtt value '20' is not an RTT like 0ms, 20ms or 0.5s"),
    ({"rtt": [20]}, "f.toml: experiment.rtt value 20 is not an RTT"),
    ({"rtt": ["20ms", "0.02s"]}, "f.toml: experiment.rtt lists 0.02s twice: give each value "
                                 "once"),
    ({"rtt": ["30s"]}, "f.toml: experiment.rtt 30s is longer than 20s"),
    ({"loss": ["0%", "100%"]}, "f.toml: experiment.loss value '100%' is not a loss from 0% to "
                               "below 100% like 0.1%"),
    ({"loss": ["x"]}, "f.toml: experiment.loss value 'x' is not a loss"),
    ({"loss": []}, "f.toml: experiment.loss must be a non-empty list like"),
])
def test_bad_values_are_refused_in_one_line(exp: dict[str, Any], msg: str) -> None:
    got = _refused(exp)
    assert got.startswith(msg) and "\n" not in got, got


@pytest.mark.usefixtures("netem_kernel")
@pytest.mark.parametrize("exp, more, msg", [
    ({"rtt": ["10ms"], "delay": "5ms"}, {},
     "f.toml: experiment.delay and f.toml: experiment.rtt both set the delay"),
    ({"rtt": ["10ms"], "delay": "5ms", "jitter": "1ms"}, {},
     "f.toml: experiment.jitter and f.toml: experiment.rtt both set the delay"),
    ({"rtt": ["10ms"]}, {"testbed": {"kind": "hub", "spokes": 2}},
     "not on a hub testbed: leave out one of them"),
    ({"loss": ["0%", "1%"]}, {"testbed": {"kind": "mesh", "sites": 3}},
     "f.toml: experiment.loss runs on two sites (here or on hosts), not on a mesh testbed"),
    ({"rtt": ["10ms"], "cpus_per_site": [1]}, {},
     "are both axes of scenarios: run one per campaign"),
])
def test_combinations_refused(exp: dict[str, Any], more: dict[str, Any], msg: str) -> None:
    got = _refused(exp, **more)
    assert msg in got, got


@pytest.mark.usefixtures("netem_kernel")
def test_sequential_needs_repeats() -> None:
    with pytest.raises(SpecError) as err:
        spec.build({"experiment": {"rtt": ["0ms", "10ms"]}}, "f.toml")
    assert "f.toml: experiment.rtt needs fixed rounds: add repeats (--repeats N)" in \
        err.value.message


@pytest.mark.skipif(not NO_NETEM, reason="this kernel has netem: the axis is accepted")
def test_a_kernel_without_netem_is_refused_in_one_line() -> None:
    got = _refused({"rtt": ["0ms", "20ms"], "loss": ["0%", "0.1%"]})
    assert got == ("f.toml: experiment.rtt/loss needs netem, which this "
                   "kernel lacks (CONFIG_NET_SCH_NETEM): run this campaign in the VM lab "
                   "(docs/vmlab.md) or between real hosts ([sites], docs/remote.md)"), got


def test_zero_values_only_need_no_netem() -> None:
    """This host's own kernel: an axis of zeros alone sets no netem, so it is not refused."""
    e = _exp({"rtt": ["0ms"], "loss": ["0%"]})
    assert e.rtts == ("0ms",) and all(e.case_netem(c.rtt, c.loss) is None for c in plan.plan(e))


@pytest.mark.skipif(not NO_NETEM, reason="this kernel has netem: the axis is accepted")
def test_flags_and_the_refusal_exit_2_before_anything(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = cli.main(["run", "--rtts", "0ms,20ms,80ms", "--losses", "0%,0.1%", "--repeats", "1",
                     "--tunnels", "native,vxlan", "--out", str(out), "--no-report"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rtts/--losses needs netem, which this kernel lacks " \
        "(CONFIG_NET_SCH_NETEM): run this campaign in the VM lab" in err[0], err
    assert not out.exists()


@pytest.mark.usefixtures("netem_kernel")
def test_flags() -> None:
    args = cli.build_parser().parse_args(["run", "--rtts", "0ms,20ms", "--losses", "0%,1%",
                                          "--repeats", "1", "--tunnels", "native"])
    e = cli.spec_from_args(args)
    assert e.rtts == ("0ms", "20ms") and e.losses == ("0%", "1%")
    for argv, msg in ((["--rtts", "0ms,x"], "--rtts value 'x' is not an RTT"),
                      (["--losses", "1"], "--losses value '1' is not a loss"),
                      (["--losses", "1%", "--loss", "1%"], "--loss and --losses both set"),
                      (["--rtts", "0ms,0ms"], "--rtts '0ms,0ms' names 0ms twice"),
                      (["--rtts", "10ms", "--delay", "5ms"],
                       "--delay and --rtts both set the delay")):
        args = cli.build_parser().parse_args(["run", "--repeats", "1", *argv])
        with pytest.raises(SpecError) as err:
            cli.spec_from_args(args)
        assert err.value.message.startswith(msg), err.value.message
    assert "--rtts" in cli.LIST_FLAGS and "--losses" in cli.LIST_FLAGS


# ---- the netem of each case --------------------------------------------------------------
@pytest.mark.parametrize("rtt, half", [("20ms", "10ms"), ("80ms", "40ms"), ("1ms", "500us"),
                                       ("0.5s", "250ms"), ("3us", "2us"), ("0ms", None)])
def test_rtt_is_half_on_each_end(rtt: str, half: str | None) -> None:
    got = wanaxis.case_netem(None, rtt, "")
    assert (got.delay if got else None) == half


def test_case_netem_keeps_the_campaigns_rate_and_sets_loss() -> None:
    base = Netem(rate="100mbit")
    assert wanaxis.case_netem(base, "0ms", "0%") == base
    assert wanaxis.case_netem(base, "20ms", "0.1%") == Netem("10ms", None, "0.1%", "100mbit")
    assert wanaxis.case_netem(None, "", "") is None
    assert wanaxis.case_netem(Netem(delay="5ms"), "", "1%") == Netem(delay="5ms", loss="1%")
    assert wanaxis.case_netem(None, "20ms", "0.1%").args() == [   # type: ignore[union-attr]
        "limit", "10000", "delay", "10ms", "loss", "0.1%"]


# ---- the plan, to_dict and --resume --------------------------------------------------------
@pytest.mark.usefixtures("netem_kernel")
def test_plan_native_first_at_each_scenario_in_every_round() -> None:
    e = _exp({"rtt": ["0ms", "20ms"], "loss": ["0%", "0.1%"]})   # vxlan listed first
    cases = plan.plan(e)
    got = [(c.repeat, c.rtt, c.loss, c.tunnel.kind) for c in cases]
    assert got == [(r, rtt, loss, k) for r in (1, 2) for rtt in ("0ms", "20ms")
                   for loss in ("0%", "0.1%") for k in ("native", "vxlan")]
    assert cases[0].case_id == "0000-native-stream-mtu1500-rtt0ms-loss0pct-r1"
    assert cases[3].case_id == "0003-vxlan-stream-mtu1500-rtt0ms-loss0.1pct-r1"
    assert cases[3].to_dict()["rtt"] == "0ms" and cases[3].to_dict()["loss"] == "0.1%"
    assert len({c.case_id for c in cases}) == len(cases)
    off = plan.plan(_exp({}))
    assert all(c.rtt == c.loss == "" and "rtt" not in c.to_dict() for c in off)
    assert [c.tunnel.kind for c in off[:2]] == ["vxlan", "native"]   # listed order kept


@pytest.mark.usefixtures("netem_kernel")
@pytest.mark.parametrize("exp", [
    {"rtt": ["0ms", "20ms", "80ms"]},
    {"loss": ["0%", "0.1%"], "delay": "10ms", "netem_rate": "200mbit"},
    {"rtt": ["0ms", "5ms"], "loss": ["0%", "1%"], "rate": "500mbit"},
])
def test_resume_rebuilds_the_same_experiment_and_cases(exp: dict[str, Any]) -> None:
    e = _exp(exp)
    again = spec.build(cli._spec_dict(e.to_dict()), e.source)
    assert again.to_dict() == e.to_dict()
    assert [c.case_id for c in plan.plan(again)] == [c.case_id for c in plan.plan(e)]


# ---- naming and the report ---------------------------------------------------------------
def _doc(kind: str, rtt: str, loss: str, rep: int, mbps: float, mtu: int = 1500
         ) -> dict[str, Any]:
    return {"case": {"id": f"{kind}-{rtt}-{loss}-{rep}", "rtt": rtt, "loss": loss,
                     "repeat": rep, "mtu": 1500, "offloads": {"name": "default"},
                     "tunnel": {"label": kind, "kind": kind, "display": kind},
                     "workload": {"name": "stream", "label": "stream", "params": {},
                                  "headline": ["throughput"]}},
            "status": "ok", "tunnel": {"mtu": mtu},
            "metrics": {"throughput": {"base": "throughput", "value": mbps, "unit": "Mbit/s",
                                       "higher_is_better": True}}}


def _docs() -> list[dict[str, Any]]:
    # vxlan: 90 % of native at 0 ms in both rounds, 80 / 50 % at 40 ms
    out = []
    for rep, (n0, v0, n40, v40) in ((1, (1000, 900, 400, 320)), (2, (1000, 900, 500, 250))):
        out += [_doc("native", "0ms", "", rep, n0), _doc("vxlan", "0ms", "", rep, v0, 1450),
                _doc("native", "40ms", "", rep, n40), _doc("vxlan", "40ms", "", rep, v40, 1450)]
    return out


def _campaign(docs: list[dict[str, Any]], experiment: dict[str, Any] | None = None
              ) -> Any:
    from tunbench.report import data, stats
    named = records.named(docs)
    return data.Campaign(Path("."), {"experiment": experiment or {}}, named,
                         stats.rows(named))


def test_scenarios_are_named_and_paired_with_native_of_the_same_rtt() -> None:
    named = records.named(_docs())
    vx = next(r for r in named if r.tunnel.kind == "vxlan" and r.repeat == 1
              and r.doc["case"]["rtt"] == "40ms")
    assert vx.workload.name == vx.workload.label == "stream rtt=40ms"
    assert vx.workload.base == "stream" and "rtt" not in vx.workload.axes
    from tunbench.report import stats
    rows = {(r.tunnel, r.workload): r for r in stats.rows(named) if r.metric == "throughput"}
    assert rows[("vxlan", "stream rtt=40ms")].pct_of_native == pytest.approx(
        100 * (0.8 * 0.5) ** 0.5)
    assert rows[("vxlan", "stream rtt=0ms")].pct_of_native == pytest.approx(90.0)


def test_mathis_model() -> None:
    # MSS 1448 B, RTT 20 ms, p = 0.1 %: 8 * 1448 / 0.02 * 1.2247 / 0.03162 = 22.43 Mbit/s
    assert distance.mathis(1448, 20.0, 0.1) == pytest.approx(
        8 * 1448 / 0.02 * math.sqrt(1.5) / math.sqrt(0.001))
    assert distance.mathis(1448, 20.0, 0.1) / 1e6 == pytest.approx(22.43, abs=0.01)
    assert distance.mathis(1448, 0.0, 0.1) is None and distance.mathis(1448, 20.0, 0) is None


def test_tables_against_rtt() -> None:
    camp = _campaign(_docs())
    (s,) = distance.sweeps(camp)
    assert (s.workload, s.rtts, s.losses, s.metric) == ("stream", ["0ms", "40ms"], [""],
                                                         "throughput")
    assert [m.tunnel for m in s.methods] == ["native", "vxlan"]
    assert s.methods[1].mss == 1450 - 52 and s.methods[0].mss == 1448
    ((title, rows),) = distance.tables(s)
    assert title == "against RTT"
    assert rows[0] == ["method", "throughput at 0ms (Mbit/s)", "throughput at 40ms (Mbit/s)",
                       "% of native at 0ms", "% of native at 40ms"]
    assert rows[1] == ["native", "1,000", "450", "100% (reference)", "100% (reference)"]
    assert rows[2] == ["vxlan", "900", "285", "90.0% (90.0-90.0; n=2)",
                       "63.2% (50.0-80.0; n=2)"]
    assert len(rows) == 3   # no loss: no Mathis row
    html = distance.section_html(camp)
    assert "Distance and loss" in html and "63.2% (50.0-80.0; n=2)" in html


def test_mathis_row_against_loss() -> None:
    docs = [_doc(k, "20ms", loss, 1, v) for loss, vals in (("0%", (100, 90)),
                                                          ("0.1%", (20, 18)))
            for k, v in zip(("native", "vxlan"), vals, strict=True)]
    camp = _campaign(docs)
    (s,) = distance.sweeps(camp)
    ((title, rows),) = distance.tables(s)
    assert title == "against loss, RTT 20ms"
    assert rows[-1][0].startswith("Mathis model") and rows[-1][1:3] == ["-", "22.4"]
    # a loss axis under a fixed delay: the RTT is twice the delay
    docs = [{**d, "case": {**d["case"], "rtt": ""}} for d in docs]
    (s,) = distance.sweeps(_campaign(docs, {"delay": "10ms"}))
    assert s.rtts == [""] and s.rtt_ms("") == 20.0
    assert distance.tables(s)[0][1][-1][1:3] == ["-", "22.4"]


def test_no_axis_no_section() -> None:
    docs = [{**d, "case": {k: v for k, v in d["case"].items() if k not in ("rtt", "loss")}}
            for d in _docs()[:2]]
    camp = _campaign(docs)
    assert camp.ok[0].workload.name == "stream"
    assert distance.sweeps(camp) == [] and distance.section_html(camp) == ""


def test_figures(tmp_path: Path) -> None:
    from tunbench.report import data, stats
    from tunbench.report.figures.base import Palette
    from tunbench.report.figures.distance import distance_figures
    docs = [_doc(k, rtt, loss, 1, v / (1 + int(rtt[:-2])))
            for rtt in ("0ms", "20ms") for loss in ("0%", "0.1%")
            for k, v in (("native", 1000), ("vxlan", 900))]
    named = records.named(docs)
    camp = data.Campaign(tmp_path, {"experiment": {}}, named, stats.rows(named))
    figs = list(distance_figures(camp, tmp_path, Palette(["native", "vxlan"])))
    assert [f.name for f in figs] == ["distance-stream-RTT-1500", "distance-stream-loss-1500"]
    for f in figs:
        assert "Mathis model" in f.caption and not f.overlaps, f
        assert f.png.stat().st_size > 0 and f.svg.stat().st_size > 0
    assert figs[0].title == "Throughput and share of native vs RTT (stream)", figs[0].title


@pytest.mark.usefixtures("netem_kernel")
def test_dry_run_names_the_netem_of_each_scenario(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    e = _exp({"rtt": ["0ms", "20ms"], "loss": ["0%", "0.1%"], "repeats": 1})
    assert cli._dry_run(e, tmp_path / "out", resume=False) == 0
    out = capsys.readouterr().out
    assert ("scenarios (netem on each underlay end): rtt=0ms loss=0%: none; rtt=0ms "
            "loss=0.1%: netem limit 10000 loss 0.1%; rtt=20ms loss=0%: netem limit 10000 "
            "delay 10ms; rtt=20ms loss=0.1%: netem limit 10000 delay 10ms loss 0.1%") in out
    assert "0007-vxlan-stream-mtu1500-rtt20ms-loss0.1pct-r1" in out
    assert not (tmp_path / "out").exists()
