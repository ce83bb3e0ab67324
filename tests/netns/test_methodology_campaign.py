"""Campaign mechanics for real: resume after SIGINT, a case that really fails, offload
variants applied with ethtool, presets with --scale, line rate from a shaped underlay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tunbench import cli, interrupts, spec, workloads
from tunbench.errors import Interrupted
from tunbench.runner import run_campaign
from tunbench.testbed import names, netlink
from tunbench.workloads.base import Context, Output, Workload, WorkloadParams, wait_for_output

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]


def _index(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "index.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def test_resume_after_sigint_keeps_recorded_cases(tmp_path: Path) -> None:
    exp = tmp_path / "e.toml"
    exp.write_text('[experiment]\nrepeats = 2\nduration = 1\nwarmup = 0\n'
                   '[[tunnel]]\nkind = "native"\n[[tunnel]]\nkind = "vxlan"\n'
                   '[[workload]]\nname = "ping"\ninterval = 0.1\n')
    out = tmp_path / "c"
    p = subprocess.Popen(TB + ["run", "--experiment", str(exp), "--out", str(out), "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        done = [c for c in _index(out).get("cases", []) if c["status"] == "ok"]
        if len(done) >= 2:
            break
        time.sleep(0.05)
    assert len(done) >= 2, "the campaign never recorded two cases"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    index = _index(out)
    assert index["state"] == "interrupted"
    recorded = {c["id"] for c in index["cases"] if c["status"] == "ok"}
    assert 2 <= len(recorded) < 4
    files = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in (out / "cases").iterdir()}
    assert set(files) == {f"{c}.json" for c in recorded}

    r = subprocess.run(TB + ["run", "--resume", str(out), "--json"], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    index = _index(out)
    assert index["state"] == "complete"
    assert [c["status"] for c in index["cases"]] == ["ok"] * 4
    now = {f.name: f for f in (out / "cases").iterdir()}
    assert len(now) == 4
    for name, (mtime, data) in files.items():       # earlier case files untouched
        assert now[name].stat().st_mtime_ns == mtime and now[name].read_bytes() == data
    summary = json.loads(r.stdout)
    assert {e["n"] for e in summary["entries"] if e["metric"] == "rtt_avg"} == {2}


class _NoServer(Workload):
    """A workload whose server really cannot start: iperf3 told to bind an address the site
    does not have (TEST-NET-1, never sent to)."""

    name = "no-server"
    summary = "test: server cannot start"
    tools: ClassVar[tuple[str, ...]] = ("iperf3",)

    def run(self, ctx: Context, params: WorkloadParams) -> Output:
        server = ctx.tb.spawn(ctx.server, ["iperf3", "-s", "-1", "-B", "192.0.2.77", "-p",
                                           str(ctx.port_base)], "iperf3-server")
        wait_for_output(server, "Server listening", timeout=3)
        return Output()


def test_failing_case_recorded_campaign_goes_on(tmp_path: Path) -> None:
    reg = workloads.registry()
    reg["no-server"] = _NoServer
    try:
        exp = spec.build({"experiment": {"repeats": 1, "duration": 1, "warmup": 0},
                          "tunnel": [{"kind": "native"}],
                          "workload": [{"name": "no-server"}, {"name": "ping",
                                                               "interval": 0.1}]}, "test")
        outcome = run_campaign(exp, tmp_path / "c")
    finally:
        reg.pop("no-server")
    docs = {d["case"]["workload"]["name"]: d for d in outcome.store.read_cases()}
    bad = docs["no-server"]
    assert bad["status"] == "failed" and "iperf3-server exited with code 1 while starting" in bad["error"]
    assert "Cannot assign requested address" in (bad["error_log"] or "") + bad["error"]
    assert docs["ping"]["status"] == "ok"
    assert outcome.failed == [bad["case"]["id"]]
    assert [c["status"] for c in _index(tmp_path / "c")["cases"]] == ["failed", "ok"]


def test_offload_variants_applied_and_recorded(tmp_path: Path) -> None:
    tables = spec.offload_tables("default,all-off") + [{"name": "lro-on", "lro": "on"}]
    exp = spec.build({"experiment": {"repeats": 1, "duration": 1, "warmup": 0},
                      "tunnel": [{"kind": "vxlan"}],
                      "workload": [{"name": "ping", "interval": 0.1}],
                      "offloads": tables}, "test")
    outcome = run_campaign(exp, tmp_path / "c")
    docs = {d["case"]["offloads"]["name"]: d for d in outcome.store.read_cases()}
    assert all(d["status"] == "ok" for d in docs.values()), [d["error"] for d in docs.values()]
    assert "requested" not in docs["default"]["offloads"]
    off = docs["all-off"]["offloads"]
    assert len(off["requested"]) == 4          # both underlay ends and both vxlan devices
    allowed = {"set", "unchanged", "fixed", "absent"}
    for dev, res in off["requested"].items():
        assert set(res) == set(spec.OFFLOAD_PRESETS["all-off"]), dev
        assert set(res.values()) <= allowed, (dev, res)
        for long in ("tcp-segmentation-offload", "generic-segmentation-offload",
                     "generic-receive-offload"):
            assert off["applied"][dev][long].startswith("off"), (dev, long)
            assert off["after"][dev][long].startswith("off")
    und = next(d for d in off["requested"] if d.endswith("ua"))
    assert off["before"][und]["tcp-segmentation-offload"] == "on"
    assert off["requested"][und]["tso"] == "set"
    assert off["requested"][und]["rx-gro-hw"] == "unchanged"       # veth: off [fixed]
    lro = docs["lro-on"]["offloads"]
    und = next(d for d in lro["requested"] if d.endswith("ua"))
    assert lro["before"][und]["large-receive-offload"] == "off [fixed]"
    assert lro["requested"][und]["lro"] == "fixed"   # veth cannot do LRO: recorded, no error
    assert docs["lro-on"]["status"] == "ok"


def test_preset_scaled_with_shaped_line_rate(tmp_path: Path) -> None:
    r = subprocess.run(TB + ["run", "--preset", "line-rate-processes", "--scale", "0.02",
                             "--tunnels", "native", "--rate", "300mbit", "--out",
                             str(tmp_path / "c"), "--json"],
                       capture_output=True, text=True, timeout=120)
    errors = [json.loads(f.read_text())["error"] for f in (tmp_path / "c/cases").iterdir()]
    assert r.returncode == 0, (r.stderr, errors)
    summary = json.loads(r.stdout)
    index = _index(tmp_path / "c")
    assert index["experiment"]["source"] == "preset line-rate-processes (scale 0.02)"
    assert index["experiment"]["duration"] == 2 and index["experiment"]["repeats"] == 1
    tp = next(e for e in summary["entries"] if e["metric"] == "throughput")
    assert tp["line_rate_source"] == "shaped underlay rate 300mbit"
    assert tp["pct_of_line_rate"] > 0
    lr = next(e for e in summary["entries"] if e["metric"] == "line_rate_pct")
    assert lr["mean"] == pytest.approx(tp["pct_of_line_rate"])


class _SwallowsSignal(Workload):
    """Like a library that catches Exception (pyroute2's netlink decoder logs a SIGINT's
    exception and re-raises it as NetlinkNLADecodeError): a real SIGINT lands inside it."""

    name = "swallows-signal"
    summary = "test: a signal's exception turned into another error"

    def run(self, ctx: Context, params: WorkloadParams) -> Output:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except Exception as exc:
            raise ValueError(f"decode failed: {exc}") from None
        return Output()


def test_a_signal_turned_into_another_error_still_interrupts(tmp_path: Path) -> None:
    """One CI run went on to exit 0 after SIGINT because pyroute2 turned the Interrupted into
    a decode error, which the runner recorded as a failed case."""
    reg = workloads.registry()
    reg["swallows-signal"] = _SwallowsSignal
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    old_hook = sys.unraisablehook
    try:
        cli.install_signal_handlers()
        exp = spec.build({"experiment": {"repeats": 1, "duration": 1, "warmup": 0},
                          "tunnel": [{"kind": "native"}],
                          "workload": [{"name": "swallows-signal"},
                                       {"name": "ping", "interval": 0.1}]}, "test")
        with pytest.raises(Interrupted):
            run_campaign(exp, tmp_path / "c")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sys.unraisablehook = old_hook
        interrupts.clear()
        reg.pop("swallows-signal")
    index = _index(tmp_path / "c")
    assert index["state"] == "interrupted"
    assert [c["status"] for c in index["cases"]] == ["pending", "pending"]
    assert not list((tmp_path / "c" / "cases").glob("*.json"))
    assert not [n for n in netlink.list_netns() if names.is_ours_netns(n)]
