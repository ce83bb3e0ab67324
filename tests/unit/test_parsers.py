"""Parsers on captured real tool output (tests/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench.errors import CommandFailed
from tunbench.metrics import cpu
from tunbench.results.envinfo import parse_ethtool_k
from tunbench.workloads.stream import parse_iperf3


def test_iperf3_single_stream(data_dir: Path) -> None:
    r = parse_iperf3((data_dir / "iperf3/tcp-1stream-vxlan.json").read_text())
    assert r["streams"] == 1 and r["protocol"] == "TCP"
    assert r["version"] == "iperf 3.12"
    # 4 intervals were reported, the first one is the -O warm-up and is excluded
    assert len(r["series_mbps"]) == 3
    assert r["series_mbps"] == pytest.approx([13013.137, 12265.493, 11465.940], rel=1e-6)
    assert r["throughput_mbps"] == pytest.approx(12259.2177, rel=1e-6)
    assert r["cpu_client_pct"] == pytest.approx(46.193, rel=1e-3)
    assert r["cpu_server_pct"] == pytest.approx(40.818, rel=1e-3)
    assert isinstance(r["retransmits"], int)


def test_iperf3_parallel_streams_sum(data_dir: Path) -> None:
    import json
    text = (data_dir / "iperf3/tcp-4streams-vxlan.json").read_text()
    r = parse_iperf3(text)
    assert r["streams"] == 4
    raw = json.loads(text)
    per_stream = sum(s["receiver"]["bits_per_second"] for s in raw["end"]["streams"]) / 1e6
    assert r["throughput_mbps"] == pytest.approx(per_stream, rel=1e-6)


def test_iperf3_error_is_one_line(data_dir: Path) -> None:
    with pytest.raises(CommandFailed, match="Connection refused"):
        parse_iperf3((data_dir / "iperf3/error-refused.json").read_text())


def test_iperf3_garbage() -> None:
    with pytest.raises(CommandFailed, match="no valid JSON"):
        parse_iperf3("iperf3: error - unable to connect")


def test_proc_stat_usage(data_dir: Path) -> None:
    a = cpu.parse_proc_stat((data_dir / "procstat/stat-1.txt").read_text())
    b = cpu.parse_proc_stat((data_dir / "procstat/stat-2.txt").read_text())
    assert set(a) == {"cpu", "cpu0", "cpu1"}
    assert all(len(v) == len(cpu.FIELDS) for v in a.values())
    u = cpu.usage(a, b)
    for name, pct in u.items():
        parts = pct["usr"] + pct["sys"] + pct["irq"] + pct["softirq"] + pct["steal"] + pct["idle"]
        assert parts == pytest.approx(100.0), name
        assert pct["busy"] == pytest.approx(100.0 - pct["idle"])


def test_proc_stat_known_values() -> None:
    prev = cpu.parse_proc_stat("cpu0 100 0 50 800 50 0 0 0 0 0\n")
    cur = cpu.parse_proc_stat("cpu0 160 0 70 900 50 10 10 0 0 0\n")
    u = cpu.usage(prev, cur)["cpu0"]
    # deltas: user 60, sys 20, idle 100, irq 10, softirq 10 -> total 200
    assert u["usr"] == pytest.approx(30.0)
    assert u["sys"] == pytest.approx(10.0)
    assert u["softirq"] == pytest.approx(5.0)
    assert u["idle"] == pytest.approx(50.0)
    assert u["busy"] == pytest.approx(50.0)


def test_pid_stat_ticks(data_dir: Path) -> None:
    text = (data_dir / "procstat/pid-stat.txt").read_text()
    fields = text[text.rindex(")") + 2:].split()
    assert cpu.parse_pid_cpu_ticks(text) == int(fields[11]) + int(fields[12])
    # a command name with spaces and parentheses does not shift the fields
    tricky = "123 (a b) c) S 1 1 1 0 -1 0 0 0 0 0 7 5 0 0 20 0 1 0 99 0 0"
    assert cpu.parse_pid_cpu_ticks(tricky) == 12


def test_ethtool_k(data_dir: Path) -> None:
    feats = parse_ethtool_k((data_dir / "ethtool-k-lo.txt").read_text())
    assert feats["rx-checksumming"] == "on [fixed]"
    assert feats["tx-checksum-ipv4"] == "off [fixed]"
    assert "generic-segmentation-offload" in feats
    assert "Features" not in " ".join(feats)


def test_busy_jiffies_of_all_cpus(data_dir: Path) -> None:
    # user + nice + system + irq + softirq + steal of the aggregate "cpu" row (idle and
    # iowait left out): 10049 + 7625 + 466 + 77, and 10188 + 7682 + 466 + 77
    assert cpu.busy_jiffies((data_dir / "procstat/stat-1.txt").read_text()) == 18217
    assert cpu.busy_jiffies((data_dir / "procstat/stat-2.txt").read_text()) == 18413
    assert cpu.busy_jiffies("cpu0 100 0 50 800 50 0 0 0 0 0\n") is None
