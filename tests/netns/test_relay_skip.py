"""A workload that cannot cross a tunnel is recorded as skipped with the reason, not run and
not failed: over ssh-forward (a TCP stream relay) ICMP, UDP and unforwarded ports cannot pass,
while iperf3 on a forwarded port and sockperf's TCP ping-pong on its own forwarded port do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import spec
from tunbench.report import stats
from tunbench.runner import run_campaign

pytestmark = [pytest.mark.correctness, pytest.mark.beside]


def test_relay_skips_what_cannot_cross_and_runs_the_rest(tmp_path: Path) -> None:
    exp = spec.build({
        "experiment": {"repeats": 1, "duration": 1, "warmup": 0},
        "tunnel": [{"kind": "ssh-forward", "ports": 1}],
        "workload": [{"name": "ping", "interval": 0.1},
                     {"name": "latency", "protocol": "udp"},
                     {"name": "latency", "label": "latency-tcp", "protocol": "tcp"},
                     {"name": "line-rate-processes", "processes": 2},
                     {"name": "udp-rate", "rate": "10m"},
                     {"name": "stream"}]}, "test")
    outcome = run_campaign(exp, tmp_path / "c")
    docs = {d["case"]["workload"]["label"]: d for d in outcome.store.read_cases()}
    assert docs["ping"]["status"] == "skipped"
    assert "ICMP (ping) cannot cross a stream relay" in docs["ping"]["error"]
    assert docs["latency"]["status"] == "skipped" and "UDP" in docs["latency"]["error"]
    assert docs["line-rate-processes"]["status"] == "skipped"
    assert "5202" in docs["line-rate-processes"]["error"]
    assert "raise the tunnel's ports parameter" in docs["line-rate-processes"]["error"]
    assert docs["udp-rate"]["status"] == "skipped"
    assert "UDP cannot cross a stream relay" in docs["udp-rate"]["error"]
    assert docs["stream"]["status"] == "ok"
    # site a's 127.0.0.1 reaches site b's sockperf server only through the forward
    assert docs["latency-tcp"]["status"] == "ok"
    assert docs["latency-tcp"]["raw"]["tcp"]["stats"]["samples"] > 0
    assert docs["latency-tcp"]["tunnel"]["relay_ports"] == [5201, 11201]   # ports = 1, sockperf
    assert docs["stream"]["metrics"]["throughput"]["value"] > 0
    assert outcome.failed == []
    summary = stats.summary_json(outcome.store.read_cases(), "c")
    assert summary["failed_cases"] == [] and len(summary["skipped_cases"]) == 4
