"""Validation of every field kind, sweeps, per-workload MTUs, presets and --scale, offload
variants, and the statistics added for the methodology (known values)."""

from __future__ import annotations

import pytest

from tunbench import presets, spec
from tunbench.errors import SpecError
from tunbench.metrics.cpu import CpuRecord
from tunbench.plan import plan
from tunbench.rates import rate_mbps
from tunbench.report import stats
from tunbench.results.records import CaseRecord
from tunbench.runner import cpu_summary

AVAIL = {"native", "vxlan"}


@pytest.mark.parametrize("exp, needle", [
    ({"repeats": "3"}, "experiment.repeats must be an integer"),          # int
    ({"repeats": True}, "experiment.repeats must be an integer"),         # bool is not int
    ({"duration": "ten"}, "experiment.duration must be a number"),        # float
    ({"noisy_cv": -0.1}, "experiment.noisy_cv must be a number from 0"),  # float range
    ({"rate": 500}, "experiment.rate 500 is not a rate"),                 # str
    ({"order": "random"}, "experiment.order must be 'listed' or 'shuffled'"),   # literal
    ({"mtus": 1500}, "experiment.mtus must be a non-empty list"),         # list
    ({"mtus": [1500, "9000"]}, "'9000' is not an MTU"),                   # list item
    ({"colour": 1}, "unknown field experiment.colour"),                   # unknown key
])
def test_experiment_field_kinds(exp: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec.build({"experiment": exp})


def test_unknown_section_and_section_kinds() -> None:
    with pytest.raises(SpecError, match="unknown section 'workloads'"):
        spec.build({"workloads": []})
    with pytest.raises(SpecError, match=r"\[\[workload\]\] must be a list of tables"):
        spec.build({"workload": {"name": "stream"}})
    with pytest.raises(SpecError, match=r"\[experiment\] must be a table"):
        spec.build({"experiment": [1]})


@pytest.mark.parametrize("wl, needle", [
    ({"name": "parallel-streams", "streams": "many"}, "parameter 'streams' must be int"),
    ({"name": "parallel-streams", "streams": [1, 0]}, "streams 0 out of range"),
    ({"name": "parallel-streams", "streams": []}, "streams must not be an empty list"),
    ({"name": "parallel-streams", "per_process": 129}, "per_process 129 out of range"),
    ({"name": "parallel-streams", "reverse": "maybe"}, "parameter 'reverse' must be bool"),
    ({"name": "ping", "interval": "fast"}, "parameter 'interval' must be float"),
    ({"name": "ping", "initial_ttl": 300}, "initial_ttl 300 out of range"),
    ({"name": "latency", "protocol": "sctp"}, "parameter 'protocol' must be one of"),
    ({"name": "latency", "msg_size": [64, 128]}, "parameter 'msg_size' must be int"),
    ({"name": "latency", "msg_size": 8}, "msg_size 8 out of range"),
    ({"name": "stream", "congestion": ["bbr"]}, "parameter 'congestion' must be str"),
    ({"name": "line-rate-processes", "processes": -1}, "processes -1 out of range"),
    ({"name": "line-rate-processes", "min_gain": 0}, "min_gain 0.0 out of range"),
    ({"name": "line-rate-processes", "max_processes": 65}, "max_processes 65 out of range"),
    ({"name": "line-rate-processes", "step_duration": 1}, "step_duration 1.0 out of range"),
    ({"name": "line-rate-processes", "turbo": 1}, "unknown parameter 'turbo'"),
    ({"name": "stream", "mtus": [100]}, "mtus: 100 is not an MTU"),
    ({"name": "stream", "label": "a b"}, "label 'a b'"),
])
def test_workload_field_kinds(wl: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec.build({"workload": [wl]})


def test_all_workload_problems_at_once() -> None:
    with pytest.raises(SpecError) as e:
        spec.build({"workload": [{"name": "ping", "interval": 0},
                                 {"name": "latency", "protocol": "x"},
                                 {"name": "stream"}, {"name": "stream"}]})
    lines = e.value.message.splitlines()
    assert len(lines) == 3
    assert "workload[0]" in lines[0] and "workload[1]" in lines[1]
    assert "used twice" in lines[2]


def test_sweep_expands_one_spec_per_value_with_labels() -> None:
    exp = spec.build({"workload": [{"name": "parallel-streams", "streams": [1, 512]}]})
    assert [(w.label, w.params.streams) for w in exp.workloads] == [   # type: ignore[attr-defined]
        ("parallel-streams-1", 1), ("parallel-streams-512", 512)]
    default = spec.build({"workload": [{"name": "parallel-streams"}]})
    assert [w.params.streams for w in default.workloads] == [  # type: ignore[attr-defined]
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    single = spec.build({"workload": [{"name": "parallel-streams", "streams": 64}]})
    assert [w.label for w in single.workloads] == ["parallel-streams"]


def test_per_workload_mtus_in_plan() -> None:
    exp = spec.build({"experiment": {"repeats": 1},
                      "tunnel": [{"kind": "native"}],
                      "workload": [{"name": "stream", "mtus": [1500, 9000]},
                                   {"name": "ping"}]})
    got = [(c.workload.label, c.mtu) for c in plan(exp)]
    assert got == [("stream", 1500), ("ping", 1500), ("stream", 9000)]
    assert exp.all_mtus() == (1500, 9000)
    assert len({c.case_id for c in plan(exp)}) == 3


def test_offload_variants_flag() -> None:
    tables = spec.offload_tables("default,no-tso-gro")
    exp = spec.build({"offloads": tables})
    assert [o.name for o in exp.offloads] == ["default", "no-tso-gro"]
    assert dict(exp.offloads[1].settings) == {"tso": "off", "gro": "off"}
    with pytest.raises(SpecError, match="unknown offload variant 'fast'"):
        spec.offload_tables("default,fast")
    with pytest.raises(SpecError, match="used twice"):
        spec.build({"offloads": [{"name": "x"}, {"name": "x"}]})
    for name, settings in spec.OFFLOAD_PRESETS.items():
        assert set(settings) <= set(spec.OFFLOAD_FEATURES), name


@pytest.mark.parametrize("name", ["single-stream", "latency", "parallel-streams",
                                  "line-rate-processes", "jumbo", "study"])
def test_presets_build_with_study_durations(name: str) -> None:
    assert name in presets.names()
    exp = spec.build(presets.load(name), f"preset {name}", available=AVAIL)
    assert exp.repeats == 10 and exp.duration == 100
    assert [t.kind for t in exp.tunnels] == ["native", "vxlan"]
    assert presets.describe(name)


def test_study_preset_plan_and_scale() -> None:
    data = presets.load("study")
    exp = spec.build(data, available=AVAIL)
    one_round = [c for c in plan(exp) if c.repeat == 1]
    jumbo = {c.workload.name for c in one_round if c.mtu == 9000}
    assert jumbo == {"stream", "latency"}
    assert sum(c.workload.name == "parallel-streams" for c in one_round) == 2 * 10
    quick = spec.build(presets.scale(data, 0.05), available=AVAIL)
    assert (quick.duration, quick.repeats, quick.warmup) == (5.0, 1, 1.0)
    tiny = spec.build(presets.scale(data, 0.001), available=AVAIL)
    assert (tiny.duration, tiny.repeats, tiny.warmup) == (2.0, 1, 1.0)   # sane minimums
    assert presets.scale(data, 0.5)["experiment"]["repeats"] == 5
    assert data["experiment"]["duration"] == 100          # the loaded preset is not changed
    for bad in (0, -1, 11):
        with pytest.raises(SpecError, match="--scale"):
            presets.scale(data, bad)
    with pytest.raises(SpecError, match="unknown preset 'studdy'"):
        presets.load("studdy")


def test_rate_mbps_units() -> None:
    assert rate_mbps("500mbit") == 500.0
    assert rate_mbps("1gbit") == 1000.0
    assert rate_mbps("10mbps") == 80.0          # tc: mbps is megabytes per second
    assert rate_mbps("1.5kbit") == pytest.approx(0.0015)
    with pytest.raises(ValueError):
        rate_mbps("fast")


def _typed(cases: list[dict]) -> list[CaseRecord]:
    """Case documents as the report reads them: typed records (results/records.py)."""
    return [CaseRecord.from_doc(d) for d in cases]


def _case(label: str, kind: str, wl: str, value: float, *, wlabel: str | None = None,
          params: dict | None = None, rate: str | None = None) -> dict:
    return {"status": "ok", "testbed": {"rate": rate},
            "case": {"id": f"{label}-{wl}-{value}", "tunnel": {"label": label, "kind": kind},
                     # as the v2 writer records it: the parameters a campaign may sweep
                     "workload": {"name": wl, "label": wlabel or wl, "params": params or {},
                                  "axes": ["streams", "processes"],
                                  "sweep_param": "streams" if wl == "parallel-streams" else None},
                     "mtu": 1500, "offloads": {"name": "default"}},
            "metrics": {"throughput": {"value": value, "unit": "Mbit/s",
                                       "higher_is_better": True}}}


def test_rows_per_sweep_value_and_line_rate() -> None:
    cases = []
    for n, nat, vx in ((1, 100.0, 50.0), (512, 400.0, 100.0)):
        lab = f"parallel-streams-{n}"
        cases += [_case("native", "native", "parallel-streams", nat, wlabel=lab,
                        params={"streams": n}),
                  _case("vxlan", "vxlan", "parallel-streams", vx, wlabel=lab,
                        params={"streams": n})]
    cases += [_case("native", "native", "line-rate-processes", 200.0),
              _case("vxlan", "vxlan", "line-rate-processes", 50.0)]
    rows = {(r.tunnel, r.label): r for r in stats.rows(_typed(cases))}
    assert rows[("vxlan", "parallel-streams-1")].pct_of_native == pytest.approx(50.0)
    assert rows[("vxlan", "parallel-streams-512")].pct_of_native == pytest.approx(25.0)
    assert rows[("vxlan", "parallel-streams-512")].sweep == 512
    lr = rows[("vxlan", "line-rate-processes")]
    assert lr.pct_of_line_rate == pytest.approx(25.0)
    assert lr.line_rate_source == "native throughput measured in the same campaign"
    assert rows[("vxlan", "parallel-streams-1")].pct_of_line_rate is None
    shaped = stats.rows(_typed([_case("vxlan", "vxlan", "line-rate-processes", 150.0,
                                      rate="300mbit")]))
    assert shaped[0].pct_of_line_rate == pytest.approx(50.0)
    assert shaped[0].line_rate_source == "shaped underlay rate 300mbit"


def test_noisy_threshold_configurable() -> None:
    cases = [_case("native", "native", "stream", v) for v in (100.0, 110.0)]  # cv ~0.067
    assert not stats.rows(_typed(cases))[0].noisy
    assert stats.rows(_typed(cases), noisy_cv=0.05)[0].noisy
    assert stats.summary_json(cases, "x", 0.05)["noisy_cv"] == 0.05


def test_cpu_summary_excludes_warmup_samples() -> None:
    def tick(t: float, busy: float) -> dict:
        return {"t": t, "cpus": {"cpu": {"usr": busy, "sys": 0.0, "irq": 0.0, "softirq": 0.0,
                                         "idle": 100 - busy, "busy": busy}}}
    rec = CpuRecord(1.0, [tick(1.0, 10.0), tick(2.0, 50.0), tick(3.0, 70.0), tick(4.0, 60.0)])
    s = cpu_summary(rec, warmup=1.0)
    assert s["warmup_excluded_samples"] == 1
    assert (s["busy_min"], s["busy_avg"], s["busy_max"]) == (50.0, 60.0, 70.0)
    assert len(s["samples"]) == 4                      # every sample is kept in the record
    # a sampler that woke late: its first sample still spans the warm-up (from 0 to 1.07 s)
    late = cpu_summary(CpuRecord(1.0, [tick(1.07, 10.0), tick(2.1, 50.0), tick(3.12, 70.0)]),
                       warmup=1.0)
    assert late["warmup_excluded_samples"] == 1 and late["busy_min"] == 50.0
    assert cpu_summary(rec, warmup=0.0)["warmup_excluded_samples"] == 0
    short = cpu_summary(CpuRecord(1.0, [tick(1.0, 10.0)]), warmup=1.0)
    assert short["warmup_excluded_samples"] == 0 and short["busy_avg"] == 10.0


def test_scale_leaves_a_boolean_repeats_for_the_spec_to_refuse() -> None:
    """`repeats = true` is not a count: --scale must not turn it into 1 round (True is an
    int in Python; found by the input fuzz test, test_experiment_fault, in a clean-clone run)."""
    from tunbench import presets
    from tunbench.errors import SpecError
    data = {"experiment": {"duration": 2, "repeats": True}, "tunnel": [{"kind": "native"}],
            "workload": [{"name": "latency"}]}
    scaled = presets.scale(data, 0.5)
    assert scaled["experiment"]["repeats"] is True
    with pytest.raises(SpecError, match="repeats must be an integer"):
        spec.build(scaled, "f.toml")
