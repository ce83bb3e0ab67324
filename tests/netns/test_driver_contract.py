"""The driver contract, run over EVERY registered kind (and each of its implementations).

Declarations: default params parse and every parameter has a one-line help; the overhead is
consistent with the MTU rule; every Missing explains itself (what, why, fix) and names only
tools and kernel options the driver declares; doctor has a row for the kind and each
implementation; every declared tool and package is one the Makefile installs (deps/apt-*.txt).
Life cycle, where this host can run the implementation: up, ping through the tunnel, the
datapath's counters moved, teardown leaves nothing behind. A kind this host cannot run skips
with the exact reason its requirements give.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kinds_here import skip_unless_here
from tunbench import doctor, runner, tunnels
from tunbench.capabilities import root_missing
from tunbench.testbed import local, names, netlink
from tunbench.testbed.ledger import STATE_DIR, Ledger
from tunbench.tunnels.base import TunnelDriver
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

DEPS = Path(__file__).resolve().parents[2] / "deps"
KINDS = sorted(tunnels.registry())
# one row per kind, and one per implementation of a kind that has several
VARIANTS = [pytest.param(k, None, id=k) for k in KINDS] + [
    pytest.param(k, impl, id=f"{k}-{impl}") for k in KINDS
    for impl in tunnels.get(k).implementations()]


def _raw(drv: type[TunnelDriver[Any]], impl: str | None) -> dict[str, Any]:
    return {str(drv.impl_param): impl} if impl else {}


def _apt_packages() -> set[str]:
    out: set[str] = set()
    for f in DEPS.glob("apt-*.txt"):
        out |= {ln.split("#")[0].strip() for ln in f.read_text().splitlines()} - {""}
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_parse_and_every_param_has_help(kind: str) -> None:
    drv = tunnels.get(kind)
    params = drv.parse_params({})
    assert params == drv.default_params()
    assert isinstance(drv.encrypts, bool) and drv.summary and "\n" not in drv.summary
    for f in dataclasses.fields(drv.Params):
        text = f.metadata.get("help")
        assert text and "\n" not in text, f"{kind}: parameter {f.name} has no one-line help"
    if drv.impl_param:
        assert drv.implementations(), f"{kind}: {drv.impl_param} is not Literal-typed"


@pytest.mark.parametrize(("kind", "impl"), VARIANTS)
def test_overhead_consistent_with_the_mtu_rule(kind: str, impl: str | None) -> None:
    drv = tunnels.get(kind)
    params = drv.parse_params(_raw(drv, impl))
    fam = drv.family(params)
    fixed = drv.tunnel_mtu.__func__ is TunnelDriver.tunnel_mtu.__func__  # type: ignore[attr-defined]
    for underlay_mtu in (1280, 1500, 9000):
        ovh = drv.overhead(params, fam)
        mtu = drv.tunnel_mtu(params, underlay_mtu)
        assert 0 <= ovh < 200, f"{kind}: overhead {ovh}"
        # a packet of the tunnel MTU, with at least `overhead` bytes added, fits the underlay
        assert 0 < mtu <= underlay_mtu - ovh, (kind, underlay_mtu, ovh, mtu)
        if fixed:   # the default rule: exactly the underlay MTU minus the overhead
            assert mtu == underlay_mtu - ovh


_TOOL = re.compile(r"^tool (\S+)$")
_OPTIONS = re.compile(r"^kernel ((?:CONFIG_\w+(?:, )?)+)$")


@pytest.mark.parametrize(("kind", "impl"), VARIANTS)
def test_requirements_explained_and_declared(kind: str, impl: str | None) -> None:
    drv = tunnels.get(kind)
    params = drv.parse_params(_raw(drv, impl))
    declared = drv.declared(drv.resolve_impl(params))
    tools = {t.name for t in declared.tools}
    options = {k.option for k in declared.kernel}
    for m in drv.requirements(params):
        assert m.what and m.why and m.fix, f"{kind}: unexplained {m}"
        assert "\n" not in m.one_line()
        if (t := _TOOL.match(m.what)):
            assert t.group(1) in tools, f"{kind} needs tool {t.group(1)} but does not declare it"
        if (k := _OPTIONS.match(m.what)):
            undeclared = set(k.group(1).split(", ")) - options
            assert not undeclared, f"{kind} needs {undeclared} but does not declare them"


def test_doctor_and_list_have_a_row_for_every_kind_and_implementation() -> None:
    report = doctor.kinds_report()
    assert set(report) == set(KINDS)
    for kind in KINDS:
        drv = tunnels.get(kind)
        entry = report[kind]
        assert entry["encrypts"] is drv.encrypts
        got = entry.get("variants") or {}
        assert list(got) == list(drv.implementations()), kind
        for impl, row in got.items():
            assert row["display"] == f"{kind} ({impl})"
            assert row["available"] or row["reasons"], f"{kind} ({impl}) unavailable, no why"
        rows = tunnels.availability(kind)
        assert [r.impl for r in rows] == [None, *drv.implementations()]


def test_doctor_and_list_print_every_implementation_with_yes_or_why_not() -> None:
    doc = subprocess.run([sys.executable, "-m", "tunbench", "doctor"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    listed = subprocess.run([sys.executable, "-m", "tunbench", "list", "--json"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    impls = {k: v["implementations"] for k, v in json.loads(listed)["tunnels"].items()}
    lines = doc.splitlines()
    for kind in KINDS:
        for r in tunnels.availability(kind)[1:]:
            row = next((i for i, ln in enumerate(lines) if ln.split()[:len(r.display.split())]
                        == r.display.split()), None)
            assert row is not None, f"doctor has no row for {r.display}"
            assert lines[row].split()[-1] == ("yes" if r.available else "no"), lines[row]
            if not r.available:   # the reasons follow, one line each
                assert lines[row + 1].strip().startswith("- "), lines[row:row + 2]
            assert impls[kind][str(r.impl)] == {"display": r.display, "available": r.available,
                                                "reasons": r.reasons}


def test_declared_tools_and_packages_are_installed_by_the_makefile() -> None:
    apt = _apt_packages()
    for kind in KINDS:
        need = tunnels.get(kind).declared()
        for tool in need.tools:
            assert tool.package, f"{kind}: tool {tool.name} has no package"
        missing = set(need.debian_packages()) - apt
        assert not missing, f"{kind} declares {missing}, which no deps/apt-*.txt installs"
        for k in need.kernel:
            assert re.fullmatch(r"CONFIG_[A-Z0-9_]+", k.option), k


# ---- life cycle, where this host can ------------------------------------------------------
def _left(rid: str) -> list[str]:
    left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
    wgdir = Path("/var/run/wireguard")
    if wgdir.is_dir():
        left += [str(p) for p in wgdir.iterdir() if p.name.startswith(f"tb{rid}")]
    left += [str(p) for p in (STATE_DIR / rid, STATE_DIR / f"{rid}.jsonl") if p.exists()]
    return left


def _moved(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> list[str]:
    return [f"{site}.{k}" for site, c in after.items() for k, v in c.items()
            if v > before.get(site, {}).get(k, 0)]


@pytest.mark.parametrize(("kind", "impl"), VARIANTS)
def test_up_traffic_teardown(kind: str, impl: str | None) -> None:
    drv = tunnels.get(kind)
    params = drv.parse_params(_raw(drv, impl))
    if impl is None and drv.implementations():
        pytest.skip(f"{kind}: the automatic choice ({drv.display(params)}) is its own row")
    root = root_missing()
    if root:
        pytest.skip(f"{drv.display(params)} cannot run here: {root.one_line()}")
    skip_unless_here(kind, **_raw(drv, impl))
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        d = drv()
        ep = d.up(tb, params)
        before = d.counters(tb, ep)
        if ep.relay:   # a stream relay carries TCP only: a short stream through it
            out = Stream().run(Context(tb, ep, duration=1, warmup=0), StreamParams())
            assert out.raw["iperf3"]["bytes_received"] > 0
        else:
            family = 4 if 4 in drv.inner_families else 6
            runner.wait_reachable(tb, ep, family)
            target = ep.b4 if family == 4 else str(ep.b6)
            tb.a.run(["ping", f"-{family}", "-c", "5", "-i", "0.2", "-W", "2", target],
                     timeout=20)
        after = d.counters(tb, ep)
        assert _moved(before, after), f"{kind}: no datapath counter moved: {after}"
    finally:
        errors = ledger.close()
        local.sweep(rid)
    assert not errors, errors
    assert not _left(rid), f"left behind: {_left(rid)}"


def test_run_refuses_an_unavailable_implementation_naming_it(tmp_path: Path) -> None:
    rows = [r for k in KINDS for r in tunnels.availability(k)[1:] if not r.available]
    if not rows:
        pytest.skip("every implementation of every kind runs on this host")
    r = rows[0]
    exp = tmp_path / "exp.toml"
    exp.write_text(f'[[tunnel]]\nkind = "{r.kind}"\n'
                   f'{tunnels.get(r.kind).impl_param} = "{r.impl}"\n'
                   '[[workload]]\nname = "stream"\n')
    out = tmp_path / "never"
    p = subprocess.run([sys.executable, "-m", "tunbench", "run", "--experiment", str(exp),
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert f"tunnel {r.display}: {r.reasons[0]}" in p.stderr
    assert not out.exists()
