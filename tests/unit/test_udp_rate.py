"""udp-rate: the iperf3 -u parser on captured real runs (tests/data/iperf3/udp-*.json, iperf3
3.12 between two namespaces, native and VXLAN), rate parsing, datagram sizing and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli_inproc
from tunbench import presets, spec
from tunbench.errors import CommandFailed, SpecError
from tunbench.workloads import udp_rate as u

CAPTURES = ["udp-300m-vxlan.json", "udp-3g-vxlan.json", "udp-500m-native.json",
            "udp-200m-2streams-vxlan.json", "udp-200m-reverse-vxlan.json"]


@pytest.mark.parametrize("name", CAPTURES)
def test_loss_agrees_with_bytes_received(data_dir: Path, name: str) -> None:
    """Lost datagrams come from the receiver's report; they must equal the datagrams sent
    minus those the received bytes account for (the client's own lost count does not)."""
    reverse = "reverse" in name
    r = u.parse_udp((data_dir / "iperf3" / name).read_text(), reverse)
    delivered = r["bytes_received"] / r["length"]
    assert delivered == pytest.approx(r["datagrams_sent"] - r["datagrams_lost"], abs=2)
    assert r["loss_pct"] == pytest.approx(100 * r["datagrams_lost"] / r["datagrams_sent"])
    assert 0 < r["goodput_mbps"] <= r["sent_mbps"]
    assert r["jitter_ms"] > 0
    # the goodput is bytes received over the receiver's seconds
    assert r["goodput_mbps"] == pytest.approx(r["bytes_received"] * 8 / r["seconds"] / 1e6)
    # one receiver interval per measured second, warm-up (-O 1) left out
    assert len(r["series_mbps"]) == 3 and all(v > 0 for v in r["series_mbps"])
    assert r["version"] == "iperf 3.12"


def test_known_values(data_dir: Path) -> None:
    r = u.parse_udp((data_dir / "iperf3/udp-300m-vxlan.json").read_text())
    assert r["bytes_received"] == 91_377_720 and r["length"] == 1422
    assert (r["datagrams_sent"], r["datagrams_lost"]) == (75_108, 10_848)
    assert r["goodput_mbps"] == pytest.approx(243.649, abs=1e-3)
    assert r["loss_pct"] == pytest.approx(14.443, abs=1e-3)
    # the client's own sum_received says 13,849 lost: not what was used
    doc = json.loads((data_dir / "iperf3/udp-300m-vxlan.json").read_text())
    assert doc["end"]["sum_received"]["lost_packets"] == 13_849
    two = u.parse_udp((data_dir / "iperf3/udp-200m-2streams-vxlan.json").read_text())
    assert two["streams"] == 2 and two["datagrams_lost"] == 1551


def test_reverse_takes_the_clients_own_report(data_dir: Path) -> None:
    text = (data_dir / "iperf3/udp-200m-reverse-vxlan.json").read_text()
    r = u.parse_udp(text, reverse=True)
    assert (r["datagrams_sent"], r["datagrams_lost"]) == (53_935, 9_802)
    # read as forward it would take the sender's report, which never sees loss
    fwd = u.parse_udp(text, reverse=False)
    assert fwd["datagrams_lost"] == 0


def test_errors_are_one_line(data_dir: Path) -> None:
    with pytest.raises(CommandFailed, match="Connection refused"):
        u.parse_udp((data_dir / "iperf3/error-refused.json").read_text())
    with pytest.raises(CommandFailed, match="no valid JSON"):
        u.parse_udp("garbage")
    tcp = (data_dir / "iperf3/tcp-1stream-vxlan.json").read_text()
    with pytest.raises(CommandFailed, match="no receiver report"):
        u.parse_udp(tcp)


@pytest.mark.parametrize("rate,bps", [("1g", 10**9), ("500M", 5 * 10**8), ("250mbit", 25 * 10**7),
                                      ("2.5g", 25 * 10**8), ("100000", 10**5), ("1.5kbit", 1500)])
def test_rates(rate: str, bps: int) -> None:
    assert u.target_bps(rate) == bps


@pytest.mark.parametrize("rate", ["fast", "1gbps", "-1g", "1kk", "1 g", "", "1g/s", "1e9"])
def test_bad_rate_refused(rate: str) -> None:
    with pytest.raises(ValueError, match="is not a rate"):
        u.target_bps(rate)


def test_client_argv_splits_rate_over_streams() -> None:
    p = u.UdpRateParams(rate="1g", streams=4, reverse=True)
    argv = u.client_argv("10.0.0.2", 5201, 5, 1, p, 1422)
    assert argv[argv.index("-b") + 1] == str(250_000_000)
    assert argv[argv.index("-l") + 1] == "1422" and "-u" in argv and "-R" in argv
    assert "--get-server-output" in argv and "-J" in u.server_argv("10.0.0.2", 5201)


def test_datagram_fits_inner_mtu() -> None:
    assert u.datagram_size(u.UdpRateParams(), 1450, 4) == 1422      # VXLAN over 1500
    assert u.datagram_size(u.UdpRateParams(), 1500, 6) == 1452
    assert u.datagram_size(u.UdpRateParams(length=512), 1450, 4) == 512
    assert u.datagram_size(u.UdpRateParams(), 65536, 4) == 65507      # loopback: UDP's limit


@pytest.mark.parametrize("raw,msg", [
    ({"rate": "fast"}, "rate 'fast' is not a rate"),
    ({"rate": "0"}, "out of range"),
    ({"rate": "500t"}, "out of range"),
    ({"rate": ["1g", "x"]}, "rate 'x' is not a rate"),
    ({"streams": 0}, "streams 0 out of range"),
    ({"length": 70000}, "length 70000 out of range"),
])
def test_spec_refuses(raw: dict, msg: str) -> None:
    with pytest.raises(SpecError, match=msg) as exc:
        spec.build({"workload": [{"name": "udp-rate", **raw}]}, "x.toml")
    assert "\n" not in exc.value.message


def test_rate_sweep_one_case_per_rate() -> None:
    exp = spec.build({"workload": [{"name": "udp-rate", "rate": ["100m", "1g"]}]}, "x.toml")
    assert [(w.label, w.params.rate) for w in exp.workloads] == [
        ("udp-rate-100m", "100m"), ("udp-rate-1g", "1g")]
    one = spec.build({"workload": [{"name": "udp-rate"}]}, "x.toml")
    assert [(w.label, w.params.rate) for w in one.workloads] == [("udp-rate", "1g")]


def test_cli_refuses_bad_rate_in_one_line(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text('[[workload]]\nname = "udp-rate"\nrate = "lots"\n')
    r = cli_inproc.tunbench("run", "--experiment", str(exp), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "rate 'lots' is not a rate" in r.stderr
    assert not (tmp_path / "out").exists()


def test_preset() -> None:
    assert "udp-rate" in presets.names() and presets.describe("udp-rate")
    exp = spec.build(presets.load("udp-rate"), "preset udp-rate",
                     available={"native", "vxlan"})
    assert (exp.duration, exp.repeats) == (20, 10)
    assert [w.label for w in exp.workloads] == ["udp-rate-100m", "udp-rate-1g", "udp-rate-10g"]
