"""The underlay rate as a campaign axis (testbed/wanaxis.py), the pure pieces: `rate` as a
list and `--rates`, the one-line refusals (exit 2 before anything changes), the plan (every
method at each rate in the same round, native first, case ids ending -rateX), each case's tbf
rate, to_dict and --resume, the naming of a case's scenario (results/records.py), and the
rate table (report/axes.py) with its figure. tbf is in this kernel: no kernel view needed."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from tunbench import cli, plan, spec
from tunbench.errors import SpecError
from tunbench.report import axes, data, stats
from tunbench.results import records

RATES = ["100mbit", "1gbit"]


def _exp(exp: dict[str, Any], **more: Any) -> spec.Experiment:
    data_: dict[str, Any] = {"experiment": {"repeats": 2, **exp},
                             "tunnel": [{"kind": "vxlan"}, {"kind": "native"}],
                             "workload": [{"name": "stream"}], **more}
    return spec.build(data_, "f.toml")


def _refused(exp: dict[str, Any], **more: Any) -> str:
    with pytest.raises(SpecError) as err:
        _exp(exp, **more)
    return str(err.value.message)


def test_a_rate_list_is_the_axis_a_string_one_rate() -> None:
    e = _exp({"rate": RATES})
    assert e.rates == ("100mbit", "1gbit") and e.rate is None and e.shaped
    assert e.to_dict()["rate"] == RATES
    assert [e.case_rate(c.rate) for c in plan.plan(e)][:4] == ["100mbit"] * 2 + ["1gbit"] * 2
    one = _exp({"rate": "500mbit"})
    assert one.rates == () and one.rate == "500mbit" and one.to_dict()["rate"] == "500mbit"
    assert {c.rate for c in plan.plan(one)} == {""} and one.case_rate("") == "500mbit"


@pytest.mark.parametrize("rate,msg", [
    ([], "f.toml: experiment.rate must be a non-empty list like [\"100mbit\", \"1gbit\"]"),
    (["100mbit", "fast"], "f.toml: experiment.rate value 'fast' is not a rate above 0 like "
                          "100mbit or 1gbit"),
    (["0mbit", "1gbit"], "f.toml: experiment.rate value '0mbit' is not a rate above 0"),
    (["100mbit", 100], "f.toml: experiment.rate value 100 is not a rate above 0"),
    (["1gbit", "1000mbit"], "f.toml: experiment.rate lists 1000mbit twice: give each value "
                            "once"),
])
def test_bad_values_are_refused_in_one_line(rate: list[Any], msg: str) -> None:
    got = _refused({"rate": rate})
    assert got.startswith(msg) and "\n" not in got, got


@pytest.mark.parametrize("exp,more,msg", [
    ({"rtt": ["0ms", "0.5ms"]}, {}, "f.toml: experiment.rate and f.toml: experiment.rtt are "
     "both axes of scenarios: run one per campaign (the report draws each method against "
     "one axis)"),
    ({"loss": ["0%"]}, {}, "f.toml: experiment.rate and f.toml: experiment.loss are both axes"),
    ({"cpus_per_site": [1, 2]}, {}, "f.toml: experiment.rate and f.toml: "
     "experiment.cpus_per_site are both axes of scenarios: run one per campaign"),
    ({}, {"testbed": {"kind": "hub", "spokes": 2}}, "f.toml: experiment.rate runs on two "
     "sites (here or on hosts), not on a hub testbed: leave out one of them"),
    ({}, {"testbed": {"kind": "mesh", "sites": 3}}, "f.toml: experiment.rate runs on two "
     "sites (here or on hosts), not on a mesh testbed"),
])
def test_combinations_refused(exp: dict[str, Any], more: dict[str, Any], msg: str) -> None:
    got = _refused({"rate": RATES, **exp}, **more)
    assert any(line.startswith(msg) for line in got.splitlines()), got


def test_sequential_needs_repeats() -> None:
    data_ = {"experiment": {"rate": RATES}, "tunnel": [{"kind": "native"}],
             "workload": [{"name": "stream"}]}
    with pytest.raises(SpecError) as err:
        spec.build(data_, "f.toml")
    assert err.value.message == "f.toml: experiment.rate needs fixed rounds: add repeats " \
        "(--repeats N)"


def test_flags() -> None:
    args = cli.build_parser().parse_args(["run", "--rates", "100mbit,1gbit", "--repeats", "1",
                                          "--tunnels", "native"])
    assert cli.spec_from_args(args).rates == ("100mbit", "1gbit")
    for argv, msg in ((["--rates", "100mbit,x"], "--rates value 'x' is not a rate above 0"),
                      (["--rates", "100mbit", "--rate", "1gbit"],
                       "--rate and --rates both set the underlay rate"),
                      (["--rates", "100mbit,0.1gbit"], "--rates lists 0.1gbit twice"),
                      (["--rates", "100mbit,1gbit", "--rtts", "0ms,1ms"],
                       "--rates and --rtts are both axes of scenarios")):
        args = cli.build_parser().parse_args(["run", "--repeats", "1", *argv])
        with pytest.raises(SpecError) as err:
            cli.spec_from_args(args)
        assert err.value.message.startswith(msg), err.value.message
    assert "--rates" in cli.LIST_FLAGS


def test_a_refusal_exits_2_before_anything(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = cli.main(["run", "--rates", "100mbit,0.1gbit", "--repeats", "1", "--tunnels",
                     "native,vxlan", "--out", str(out), "--no-report"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rates lists 0.1gbit twice: give each value once" in err[0], err
    assert not out.exists()


def test_plan_native_first_at_each_rate_in_every_round() -> None:
    cases = plan.plan(_exp({"rate": RATES}))
    assert [(c.repeat, c.rate, c.tunnel.kind) for c in cases] == [
        (r, rate, k) for r in (1, 2) for rate in RATES for k in ("native", "vxlan")]
    assert cases[1].case_id == "0001-vxlan-stream-mtu1500-rate100mbit-r1"
    assert cases[6].case_id == "0006-native-stream-mtu1500-rate1gbit-r2"
    assert cases[0].to_dict()["rate"] == "100mbit"


@pytest.mark.parametrize("exp", [{"rate": RATES}, {"rate": RATES, "delay": "5ms"}])
def test_resume_rebuilds_the_same_experiment_and_cases(exp: dict[str, Any]) -> None:
    e = _exp(exp)
    again = spec.build(cli._spec_dict(e.to_dict()), e.source)
    assert again.to_dict() == e.to_dict()
    assert [c.case_id for c in plan.plan(again)] == [c.case_id for c in plan.plan(e)]


def test_dry_run_names_the_tbf_of_each_rate(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    e = _exp({"rate": RATES, "repeats": 1})
    assert cli._dry_run(e, tmp_path / "out", resume=False) == 0
    out = capsys.readouterr().out
    assert ("scenarios (tbf on each underlay end): rate=100mbit: tbf rate 100mbit burst 256kb "
            "latency 50ms; rate=1gbit: tbf rate 1gbit burst 256kb latency 50ms") in out
    assert "0003-vxlan-stream-mtu1500-rate1gbit-r1" in out
    assert not (tmp_path / "out").exists()


# ---- naming and the report ---------------------------------------------------------------
def _doc(kind: str, rate: str, rep: int, mbps: float) -> dict[str, Any]:
    return {"case": {"id": f"{kind}-{rate}-{rep}", "rate": rate, "repeat": rep, "mtu": 1500,
                     "offloads": {"name": "default"},
                     "tunnel": {"label": kind, "kind": kind, "display": kind},
                     "workload": {"name": "stream", "label": "stream", "params": {},
                                  "headline": ["throughput"]}},
            "status": "ok", "testbed": {"rate": rate},
            "metrics": {"throughput": {"base": "throughput", "value": mbps, "unit": "Mbit/s",
                                       "higher_is_better": True}}}


# vxlan: 99 / 97 % of native at 100mbit, 70 / 60 % at 1gbit
VALUES = {(1, "100mbit"): (95, 94.05), (2, "100mbit"): (96, 93.12),
          (1, "1gbit"): (900, 630), (2, "1gbit"): (1000, 600)}


def _campaign(tmp: Path = Path(".")) -> data.Campaign:
    docs = [_doc(k, rate, rep, v) for (rep, rate), vals in VALUES.items()
            for k, v in zip(("native", "vxlan"), vals, strict=True)]
    named = records.named(docs)
    return data.Campaign(tmp, {"experiment": {"rate": RATES}}, named, stats.rows(named))


def test_scenarios_are_named_and_paired_with_native_of_the_same_rate() -> None:
    camp = _campaign()
    vx = next(r for r in camp.ok if r.tunnel.kind == "vxlan" and r.rate == "1gbit")
    assert vx.workload.name == "stream rate=1gbit" and vx.workload.base == "stream"
    rows = {(r.tunnel, r.workload): r for r in camp.rows if r.metric == "throughput"}
    assert rows[("vxlan", "stream rate=1gbit")].pct_of_native == pytest.approx(
        100 * (0.7 * 0.6) ** 0.5)


def test_the_table_against_rate() -> None:
    camp = _campaign()
    (s,) = axes.rate_alongs(camp)
    assert (s.workload, s.values, s.metric) == ("stream", RATES, "throughput")
    rows = s.rows()
    assert rows[0] == ["method", "throughput at 100mbit (Mbit/s)", "throughput at 1gbit "
                       "(Mbit/s)", "% of native at 100mbit", "% of native at 1gbit"]
    assert rows[1] == ["native", "95.5", "950", "100% (reference)", "100% (reference)"]
    gm = math.exp(statistics.fmean(math.log(x) for x in (0.7, 0.6)))
    assert rows[2] == ["vxlan", "93.6", "615", "98.0% (97.0-99.0; n=2)",
                       f"{100 * gm:.1f}% (60.0-70.0; n=2)"]
    page = axes.rate_section_html(camp)
    assert "<h2 id=rate>Underlay rate</h2>" in page and "stream: against rate" in page


def test_no_axis_no_section() -> None:
    docs = [{**d, "case": {k: v for k, v in d["case"].items() if k != "rate"}}
            for d in (_doc("native", "1gbit", 1, 900), _doc("vxlan", "1gbit", 1, 800))]
    named = records.named(docs)
    camp = data.Campaign(Path("."), {"experiment": {}}, named, stats.rows(named))
    assert axes.rate_alongs(camp) == [] and axes.rate_section_html(camp) == ""


def test_figure(tmp_path: Path) -> None:
    from tunbench.report.figures.axes import rate_figures
    from tunbench.report.figures.base import Palette
    (f,) = rate_figures(_campaign(tmp_path), tmp_path, Palette(["native", "vxlan"]))
    assert f.name == "rate-stream-1500" and not f.overlaps
    assert f.title == "Throughput and share of native vs underlay rate (stream)", f.title
    assert f.png.stat().st_size > 0 and f.svg.stat().st_size > 0
