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


def test_iperf3_reverse(data_dir: Path) -> None:
    """`iperf3 -c ... -t 2 -P 2 -R -J` on loopback (iperf 3.12): the client receives."""
    import json
    text = (data_dir / "iperf3/tcp-2streams-reverse-lo.json").read_text()
    r = parse_iperf3(text)
    raw = json.loads(text)
    assert r["reverse"] is True and r["bidir"] is False and r["streams"] == 2
    assert r["throughput_mbps"] == pytest.approx(
        raw["end"]["sum_received"]["bits_per_second"] / 1e6)
    assert r["bytes_received"] == raw["end"]["sum_received"]["bytes"] > 0
    assert len(r["series_mbps"]) == 2 and "throughput_a_to_b_mbps" not in r


def test_iperf3_bidir_sums_both_directions(data_dir: Path) -> None:
    """`iperf3 -c ... -t 2 -P 2 --bidir -J` on loopback (iperf 3.12): the client's direction
    in sum/sum_received, the server's in the *_bidir_reverse twins (3.12 records no bidir
    flag in test_start)."""
    import json
    text = (data_dir / "iperf3/tcp-2streams-bidir-lo.json").read_text()
    raw = json.loads(text)
    assert "bidir" not in raw["start"]["test_start"]
    r = parse_iperf3(text)
    end = raw["end"]
    ab = end["sum_received"]["bits_per_second"] / 1e6
    ba = end["sum_received_bidir_reverse"]["bits_per_second"] / 1e6
    assert r["bidir"] is True and r["reverse"] is False and r["streams"] == 2
    assert r["throughput_a_to_b_mbps"] == pytest.approx(ab)
    assert r["throughput_b_to_a_mbps"] == pytest.approx(ba)
    assert r["throughput_mbps"] == pytest.approx(ab + ba)
    assert r["bytes_received"] == (end["sum_received"]["bytes"]
                                   + end["sum_received_bidir_reverse"]["bytes"])
    assert r["retransmits"] == (end["sum_sent"]["retransmits"]
                                + end["sum_sent_bidir_reverse"]["retransmits"])
    per_iv = [iv["sum"]["bits_per_second"] / 1e6 for iv in raw["intervals"]]
    back = [iv["sum_bidir_reverse"]["bits_per_second"] / 1e6 for iv in raw["intervals"]]
    assert r["series_a_to_b_mbps"] == pytest.approx(per_iv)
    assert r["series_b_to_a_mbps"] == pytest.approx(back)
    assert r["series_mbps"] == pytest.approx([x + y for x, y in zip(per_iv, back)])
