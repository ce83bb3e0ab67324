"""Site size in cores (testbed/sitecores.py), the pure pieces: the `cpus_per_site` axis and
its one-line refusals, the CPUs each site gets, the plan (every method at each count in the
same round), the cgroup hierarchy found from mountinfo, the naming of a case's core count
into its scenario (results/records.py), and the scaling table (report/sitesize.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunbench import cli, plan, spec
from tunbench.errors import SpecError
from tunbench.report import sitesize
from tunbench.results import records
from tunbench.testbed import placement, sitecores

N = len(sitecores.host_cpus())


def _exp(exp: dict[str, Any], **more: Any) -> spec.Experiment:
    data: dict[str, Any] = {"experiment": {"repeats": 2, **exp},
                            "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                            "workload": [{"name": "stream"}], **more}
    return spec.build(data, "f.toml")


def _refused(exp: dict[str, Any], **more: Any) -> str:
    with pytest.raises(SpecError) as err:
        _exp(exp, **more)
    return str(err.value.message)


# ---- the setting -------------------------------------------------------------------------
def test_axis_is_recorded_and_turns_on_receive_steering() -> None:
    e = _exp({"cpus_per_site": [1]})
    assert e.cpus_per_site == (1,)
    assert e.placement == "sites"                     # cgroup + RPS on the site's CPUs
    assert e.to_dict()["cpus_per_site"] == [1] and e.to_dict()["placement"] == "sites"
    assert _exp({"cpus_per_site": [1], "placement": "processes"}).placement == "processes"
    plain = _exp({})
    assert plain.cpus_per_site == () and "cpus_per_site" not in plain.to_dict()


@pytest.mark.skipif(N < 2, reason="needs a host with 2 CPUs")
def test_axis_of_two_values() -> None:
    e = _exp({"cpus_per_site": [1, 2]})
    assert e.cpus_per_site == (1, 2)


@pytest.mark.parametrize("value, msg", [
    ([0], "f.toml: experiment.cpus_per_site: 0 is not a number of cores (1 or more)"),
    ([N + 1], f"f.toml: experiment.cpus_per_site: {N + 1} cores per site, but this host "
              f"gives tunbench {N} CPU"),
    ([1, 1], "f.toml: experiment.cpus_per_site: 1 is listed twice"),
    ([], "f.toml: experiment.cpus_per_site must be a non-empty list of core counts"),
    ("2", "f.toml: experiment.cpus_per_site must be a non-empty list of core counts"),
    ([1.5], "f.toml: experiment.cpus_per_site: 1.5 is not a number of cores"),
    ([True], "f.toml: experiment.cpus_per_site: True is not a number of cores"),
])
def test_bad_values_are_refused_in_one_line(value: Any, msg: str) -> None:
    got = _refused({"cpus_per_site": value})
    assert got.startswith(msg) and "\n" not in got, got


@pytest.mark.parametrize("exp, more, msg", [
    ({"placement": "off"}, {},
     "f.toml: experiment.cpus_per_site confines each site, but f.toml: experiment.placement "
     "is 'off'"),
    ({"repeats": None}, {}, "f.toml: experiment.cpus_per_site needs fixed rounds"),
    ({}, {"workload": [{"name": "stream", "affinity": "0"}]},
     "workload stream's affinity both choose iperf3's CPUs"),
    ({}, {"testbed": {"kind": "hub", "spokes": 2}}, "not with a hub testbed"),
    ({}, {"testbed": {"kind": "mesh", "sites": 3}}, "not with a mesh testbed"),
    ({}, {"sites": {"a": "root@gw1", "b": "root@gw2"}}, "not with [sites] (hosts)"),
])
def test_combinations_refused(exp: dict[str, Any], more: dict[str, Any], msg: str) -> None:
    exp = {"cpus_per_site": [1], **exp}
    if exp.get("repeats", 2) is None:
        exp.pop("repeats")
        data: dict[str, Any] = {"experiment": exp, "tunnel": [{"kind": "native"}],
                                "workload": [{"name": "stream"}]}
        with pytest.raises(SpecError) as err:
            spec.build(data, "f.toml")
        got = str(err.value.message)
    else:
        got = _refused(exp, **more)
    assert msg in got, got


def test_flag() -> None:
    args = cli.build_parser().parse_args(["run", "--cpus-per-site", "1", "--repeats", "1",
                                          "--tunnels", "native"])
    e = cli.spec_from_args(args)
    assert e.cpus_per_site == (1,)
    args = cli.build_parser().parse_args(["run", "--cpus-per-site", "1,x", "--repeats", "1"])
    with pytest.raises(SpecError) as err:
        cli.spec_from_args(args)
    assert err.value.message == "--cpus-per-site '1,x' is not a list of core counts"
    args = cli.build_parser().parse_args(["run", "--cpus-per-site", "0", "--repeats", "1"])
    with pytest.raises(SpecError) as err:
        cli.spec_from_args(args)
    assert err.value.message.startswith("--cpus-per-site: 0 is not a number of cores")


def test_bad_flag_exits_2_before_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    out = tmp_path / "out"
    code = cli.main(["run", "--cpus-per-site", f"1,{N + 1}", "--repeats", "1",
                     "--tunnels", "native", "--out", str(out), "--no-report"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and f"{N + 1} cores per site" in err[0], err
    assert not out.exists()


# ---- the CPUs of each site: one layout per campaign -------------------------------------
@pytest.mark.parametrize("axis, n, lay", [
    ([1, 2], 2, "shared"),      # this host: 2 x 2 > 2, so both sites share at 1 and at 2
    ([1], 2, "apart"),          # 2 x 1 <= 2
    ([2], 2, "shared"),
    ([1, 2], 4, "apart"),
    ([2, 1], 4, "apart"),       # the order of the axis does not matter
    ([1, 2, 3], 4, "shared"),   # 2 x 3 > 4: shared at every count, 1 and 2 included
    ([1, 3], 6, "apart"),
])
def test_layout_from_the_whole_axis(axis: list[int], n: int, lay: str) -> None:
    assert sitecores.layout(axis, n) == lay
    why = sitecores.layout_reason(lay, axis, n)
    assert f"2 x {max(axis)} cores per site" in why and f"{n} CPUs" in why
    assert ("do not fit" in why) == (lay == "shared")


def test_layout_of_no_axis_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        sitecores.layout([], 2)


@pytest.mark.parametrize("k, avail, lay, sets", [
    (1, [0, 1], "shared", {"a": "0", "b": "0"}),         # this host, axis 1, 2: both on CPU 0
    (2, [0, 1], "shared", {"a": "0-1", "b": "0-1"}),     # ... and both on both at 2
    (1, [0, 1], "apart", {"a": "0", "b": "1"}),          # this host, axis [1] alone
    (1, [0, 1, 2, 3], "apart", {"a": "0", "b": "1"}),    # 4 CPUs, axis 1, 2: apart at both
    (2, [0, 1, 2, 3], "apart", {"a": "0-1", "b": "2-3"}),
    (1, [0, 1, 2, 3], "shared", {"a": "0", "b": "0"}),   # 4 CPUs, axis 1, 2, 3
    (3, [0, 1, 2, 3], "shared", {"a": "0-2", "b": "0-2"}),
    (1, [3, 5], "apart", {"a": "3", "b": "5"}),          # an affinity with holes
    (2, [3, 5, 7], "shared", {"a": "3,5", "b": "3,5"}),
])
def test_site_sets(k: int, avail: list[int], lay: str, sets: dict[str, str]) -> None:
    assert sitecores.site_sets(k, avail, lay) == sets


@pytest.mark.parametrize("axis, n", [([1, 2], 2), ([1, 2], 4), ([1, 2, 3], 4), ([1], 2)])
def test_every_count_of_an_axis_has_the_same_layout(axis: list[int], n: int) -> None:
    """What the layout is for: across the axis only the capacity changes, a and b are either
    disjoint at every count or equal at every count."""
    lay = sitecores.layout(axis, n)
    sets = [sitecores.site_sets(k, range(n), lay) for k in axis]
    assert {s["a"] == s["b"] for s in sets} == {lay == "shared"}
    assert [len(placement.parse_cpus(s["a"])) for s in sets] == axis


def test_site_sets_refuses_more_than_there_are() -> None:
    with pytest.raises(ValueError, match="only 2 CPUs"):
        sitecores.site_sets(3, [0, 1], "shared")
    with pytest.raises(ValueError):
        sitecores.site_sets(0, [0, 1], "shared")
    with pytest.raises(ValueError, match="apart need 4 CPUs"):
        sitecores.site_sets(2, [0, 1], "apart")
    with pytest.raises(ValueError, match="layout"):
        sitecores.site_sets(1, [0, 1], "together")


# ---- the plan ----------------------------------------------------------------------------
def test_plan_measures_every_method_at_each_count_in_the_same_round() -> None:
    e = _exp({"cpus_per_site": [1]})
    e = spec.Experiment(e.tunnels, e.workloads, repeats=2, cpus_per_site=(1, 2))
    cases = plan.plan(e)
    got = [(c.repeat, c.cpus, c.tunnel.kind) for c in cases]
    assert got == [(r, k, t) for r in (1, 2) for k in (1, 2) for t in ("native", "vxlan")]
    assert cases[0].case_id == "0000-native-stream-mtu1500-cpu1-r1"
    assert cases[0].to_dict()["cpus_per_site"] == 1
    assert len({c.case_id for c in cases}) == len(cases)
    off = plan.plan(spec.Experiment(e.tunnels, e.workloads, repeats=1))
    assert all(c.cpus == 0 and "cpus_per_site" not in c.to_dict() for c in off)
    assert off[0].case_id == "0000-native-stream-mtu1500-r1"


# ---- the cgroup hierarchy ----------------------------------------------------------------
V1 = """\
30 25 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
SELF = "4:memory:/x/y\n3:cpuset:/\n0::/\n"


def test_mountinfo_and_own_cgroup() -> None:
    mounts = sitecores.parse_mountinfo(V1)
    assert ("/sys/fs/cgroup/cpuset", "cgroup", "rw,cpuset") in mounts
    assert sitecores.own_cgroup(SELF, 1) == "/" and sitecores.own_cgroup(SELF, 2) == "/"
    assert sitecores.own_cgroup("5:cpuset,cpu:/tb\n0::/a/b\n", 1) == "/tb"
    assert sitecores.own_cgroup("5:cpuset,cpu:/tb\n0::/a/b\n", 2) == "/a/b"


def test_v2_when_its_cpuset_is_enabled_else_v1(tmp_path: Path) -> None:
    uni, v1 = tmp_path / "unified", tmp_path / "cpuset"
    uni.mkdir()
    v1.mkdir()
    (uni / "cgroup.subtree_control").write_text("hugetlb\n")   # as on this host
    text = (f"33 30 0:30 / {v1} rw - cgroup cgroup rw,cpuset\n"
            f"40 30 0:37 / {uni} rw - cgroup2 cgroup2 rw\n")
    got = sitecores.find_hierarchy(text, SELF)
    assert got == sitecores.Hierarchy(1, v1, v1) and got.mechanism == "cgroup v1 cpuset"
    (uni / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
    got = sitecores.find_hierarchy(text, SELF)
    assert got == sitecores.Hierarchy(2, uni, uni)
    (uni / "cgroup.subtree_control").write_text("\n")
    only_v2 = f"40 30 0:37 / {uni} rw - cgroup2 cgroup2 rw\n"
    assert sitecores.find_hierarchy(only_v2, SELF) is None


def test_this_hosts_hierarchy_reads() -> None:
    hier = sitecores.find_hierarchy()
    if hier is None:
        pytest.skip("no cpuset cgroup on this host")
    assert hier.parent.is_dir()
    assert set(hier.effective_cpus()) >= set(sitecores.host_cpus())


def test_join_argv_goes_through_this_process_root() -> None:
    import os
    argv = sitecores.join_argv(Path("/sys/fs/cgroup/cpuset/tb-abcde-a"), ["iperf3", "-s"])
    assert argv[1] == "-S" and argv[2].endswith("testbed/cgjoin.py")
    assert argv[3] == f"/proc/{os.getpid()}/root/sys/fs/cgroup/cpuset/tb-abcde-a/cgroup.procs"
    assert argv[4:] == ["--", "iperf3", "-s"]


# ---- naming and the scaling table --------------------------------------------------------
def _doc(kind: str, k: int, rep: int, mbps: float, cpu: float) -> dict[str, Any]:
    return {"case": {"id": f"{kind}-{k}-{rep}", "cpus_per_site": k, "repeat": rep, "mtu": 1500,
                     "offloads": {"name": "default"},
                     "tunnel": {"label": kind, "kind": kind, "display": kind},
                     "workload": {"name": "stream", "label": "stream", "params": {},
                                  "headline": ["throughput"]}},
            "status": "ok",
            "metrics": {"throughput": {"base": "throughput", "value": mbps, "unit": "Mbit/s",
                                       "higher_is_better": True},
                        "cpu_per_gbit": {"base": "cpu_per_gbit", "value": cpu,
                                         "unit": "% of a core per Gbit/s",
                                         "higher_is_better": False}}}


def _docs() -> list[dict[str, Any]]:
    # wireguard: 1 core gives half of 2 cores in round 1, 60 % in round 2
    return [_doc("native", 1, 1, 1000, 10), _doc("wireguard", 1, 1, 100, 50),
            _doc("native", 2, 1, 1100, 11), _doc("wireguard", 2, 1, 200, 40),
            _doc("native", 1, 2, 1000, 10), _doc("wireguard", 1, 2, 120, 50),
            _doc("native", 2, 2, 1000, 11), _doc("wireguard", 2, 2, 200, 40)]


def test_core_counts_are_scenarios_of_their_own() -> None:
    named = records.named(_docs())
    wg1 = next(r for r in named if r.tunnel.kind == "wireguard" and r.repeat == 1)
    assert wg1.workload.name == "stream cpus_per_site=1"
    assert wg1.workload.label == "stream cpus_per_site=1"
    assert wg1.workload.base == "stream" and wg1.workload.params["cpus_per_site"] == 1
    assert "cpus_per_site" in wg1.workload.axes
    from tunbench.report import stats
    rows = {(r.tunnel, r.workload): r for r in stats.rows(named) if r.metric == "throughput"}
    # share of native paired with native at the same count in the same round
    assert rows[("wireguard", "stream cpus_per_site=1")].pct_of_native == pytest.approx(
        100 * (0.1 * 0.12) ** 0.5)
    assert rows[("wireguard", "stream cpus_per_site=2")].stats.n == 2


def test_scaling_table() -> None:
    from tunbench.report import data
    named = records.named(_docs())
    from tunbench.report import stats
    camp = data.Campaign(Path("."), {}, named, stats.rows(named))
    found = sitesize.scalings(camp)
    assert len(found) == 1
    s = found[0]
    assert (s.workload, s.cores, s.metric) == ("stream", [1, 2], "throughput")
    wg = next(m for m in s.methods if m.tunnel == "wireguard")
    gm, lo, hi, n = wg.share(1, 2) or (0, 0, 0, 0)
    assert n == 2 and lo == pytest.approx(0.5) and hi == pytest.approx(0.6)
    assert gm == pytest.approx((0.5 * 0.6) ** 0.5)
    cells = sitesize.rows(s)
    assert cells[0][0] == "method" and cells[0][-1].startswith("at 1 core(s) as % of at 2")
    wg_row = next(r for r in cells if r[0] == "wireguard")
    assert wg_row[1:3] == ["110", "200"] and wg_row[3:5] == ["50.0", "40.0"]
    assert wg_row[5] == "54.8% (50.0-60.0; n=2)"
    html = sitesize.section_html(camp)
    assert "Site size in cores" in html and "54.8% (50.0-60.0; n=2)" in html
    sweeps = [sw for sw in data.sweeps(camp) if sw.param == "cpus_per_site"]
    assert sweeps and set(sweeps[0].points["throughput"]["wireguard"]) == {1, 2}


def _with_layout(docs: list[dict[str, Any]], lay: dict[int, dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    return [{**d, "testbed": {"cores": lay[d["case"]["cpus_per_site"]]}} for d in docs]


def test_section_says_the_layout_and_why() -> None:
    from tunbench.report import data, stats
    why = sitecores.layout_reason("shared", [1, 2], 2)
    shared = {k: {"layout": "shared", "layout_reason": why, "apart": False} for k in (1, 2)}
    named = records.named(_with_layout(_docs(), shared))
    camp = data.Campaign(Path("."), {}, named, stats.rows(named))
    (s,) = sitesize.scalings(camp)
    assert s.layout == "shared" and s.layouts == {1: {"shared"}, 2: {"shared"}}
    assert s.layout_text() == f"Layout: shared ({why})."
    html = sitesize.section_html(camp)
    assert "Layout: shared (2 x 2 cores per site do not fit in the 2 CPUs available" in html
    # recorded before one layout per campaign: apart at 1, shared at 2 (the `apart` flag only)
    old = {1: {"apart": True}, 2: {"apart": False}}
    named = records.named(_with_layout(_docs(), old))
    (s,) = sitesize.scalings(data.Campaign(Path("."), {}, named, stats.rows(named)))
    assert s.layout == "mixed"
    assert s.layout_text().startswith("Layout: mixed (apart at 1, shared at 2)")
    # nothing recorded
    (s,) = sitesize.scalings(data.Campaign(Path("."), {}, records.named(_docs()),
                                           stats.rows(records.named(_docs()))))
    assert s.layout == "" and s.layout_text() == "Layout: not recorded."


def test_dry_run_shows_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    if N < 2:
        pytest.skip("the axis 1, 2 needs 2 CPUs")
    code = cli.main(["run", "--cpus-per-site", "1,2", "--repeats", "1", "--tunnels",
                     "native", "--dry-run", "--no-report"])
    assert code == 0
    out = capsys.readouterr().out
    lay = sitecores.layout([1, 2], N)
    line = next(x for x in out.splitlines() if x.startswith("cores per site"))
    assert line.startswith(f"cores per site, {lay}: 1: a on ")
    want = {k: sitecores.site_sets(k, sitecores.host_cpus(), lay) for k in (1, 2)}
    assert all(f"{k}: a on {s['a']}, b on {s['b']}" in line for k, s in want.items())
    assert f"  layout {lay}: {sitecores.layout_reason(lay, [1, 2], N)}" in out


def test_no_axis_no_section() -> None:
    from tunbench.report import data, stats
    docs = [{**d, "case": {k: v for k, v in d["case"].items() if k != "cpus_per_site"}}
            for d in _docs()[:2]]
    named = records.named(docs)
    assert named[0].workload.name == "stream"
    camp = data.Campaign(Path("."), {}, named, stats.rows(named))
    assert sitesize.section_html(camp) == ""


def test_figure_against_cores(tmp_path: Path) -> None:
    from tunbench.report import data, stats
    from tunbench.report.figures.base import Palette
    from tunbench.report.figures.sweeps import sweep_figures
    named = records.named(_docs())
    camp = data.Campaign(tmp_path, {}, named, stats.rows(named))
    figs = list(sweep_figures(camp, tmp_path, Palette(["native", "wireguard"])))
    assert len(figs) == 1
    f = figs[0]
    assert f.name.startswith("sweep-") and "cpus_per_site" in f.name
    assert f.title.endswith("vs cores per site (stream)"), f.title
    assert f.title.startswith("Throughput") and "CPU per Gbit/s" in f.title, f.title
    assert "cpuset cgroup" in f.caption and not f.overlaps
    assert f.png.stat().st_size > 0 and f.svg.stat().st_size > 0
