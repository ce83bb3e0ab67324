"""rpc workload without root: the parsers on captured tunbench-rpc output (tests/data/rpc/,
two ends of real runs on a namespace's loopback), the size-mix grammar, params validation and
the result records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench.errors import CommandFailed, SpecError
from tunbench.workloads import get
from tunbench.workloads.rpc import (
    MIXES,
    RpcParams,
    client_argv,
    metrics_of,
    mix_mean,
    parse_client,
    parse_mix,
    parse_server,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "rpc"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_client_default_mix_capture() -> None:
    c = parse_client(_read("client-micro-64conn-loopback.json"))
    assert c["connections"] == c["connected"] == 64
    assert c["threads"] == 2 and c["duration_s"] == 3.0
    # the rate is the window's count over its length; every count lies in a second of it
    assert c["tx_per_s"] == pytest.approx(c["transactions"] / 3.0)
    assert sum(c["per_second"]) == c["transactions"] == c["samples"]
    assert len(c["per_second"]) == 3
    lat = c["latency_us"]
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"] and lat["std"] > 0
    assert c["mean_request"] == pytest.approx(mix_mean(parse_mix("micro")))
    assert c["conn_errors"] == c["framing_errors"] == c["connect_errors"] == 0


def test_client_fixed_size_ipv6_capture() -> None:
    c = parse_client(_read("client-fixed100-4conn-ipv6.json"))
    assert c["connected"] == 4 and c["threads"] == 1
    assert c["mean_request"] == 100.0 and c["mean_response"] == 250.0
    # fixed 100 B requests: the bytes written are 100 per transaction (window plus edges)
    assert c["request_bytes"] % 100 == 0
    assert c["request_bytes"] / 100 >= c["transactions"]


def test_server_capture() -> None:
    s = parse_server(_read("server-fixed100-4conn-ipv6.json"))
    assert s["accepted"] == 4 and s["stop_reason"] == "clients-closed"
    # 100 B per request: the server's bytes in are whole requests
    assert s["bytes_in"] == 100 * s["transactions"]
    c = parse_client(_read("client-fixed100-4conn-ipv6.json"))
    assert s["transactions"] >= c["transactions"]     # the server also counts warm-up


def test_no_result_is_refused() -> None:
    with pytest.raises(CommandFailed, match="printed no JSON"):
        parse_client("tunbench-rpc: no connection to 10.0.0.2:11301 could be opened\n")
    empty = ('{"tool":"tunbench-rpc","role":"client","connections":4,"connected":0,'
             '"transactions":0,"latency_us":{"p50":null}}')
    with pytest.raises(CommandFailed, match="no transaction"):
        parse_client(empty)


def test_mix_grammar() -> None:
    assert parse_mix("micro") == [(64, 128, 70), (200, 512, 25), (1024, 4096, 5)]
    assert parse_mix("100") == [(100, 100, 1)]
    assert parse_mix("64-128:3, 1000:1") == [(64, 128, 3), (1000, 1000, 1)]
    assert mix_mean(parse_mix("100-200:1,300:1")) == 225.0


@pytest.mark.parametrize("bad,why", [
    ("4-10:1", "8..1048576"), ("128-64:1", "reversed"), ("64:0", "weight 0"),
    ("64:x", "not SIZE"), ("", "not SIZE"), ("small", "not SIZE"), ("64-2000000", "8.."),
    ("\u0666\u0664", "not SIZE"), ("64:99999999999", "weight above")])
def test_bad_mix_is_one_clear_problem(bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_mix(bad)
    with pytest.raises(SpecError) as e:
        get("rpc").parse_params({"mix": bad})
    assert "workload rpc: mix:" in str(e.value) and "\n" not in str(e.value)


def test_params() -> None:
    wl = get("rpc")
    p = wl.parse_params({"connections": 16, "mix": "64-200:1", "response_mix": "micro"})
    assert p.mix_spec() == "64-200:1" and p.response_spec() == MIXES["micro"]
    assert RpcParams().response_spec() == MIXES["micro"]
    for bad in ({"connections": 0}, {"threads": 65}, {"response_mix": "9-8"}):
        with pytest.raises(SpecError):
            wl.parse_params(bad)
    argv = client_argv("/bin/tunbench-rpc", "10.0.0.2", 11301, p, 2.0, 1.0)
    assert argv[argv.index("--mix") + 1] == "64-200:1"
    assert argv[argv.index("--connections") + 1] == "16"
    assert wl.sweep == "connections" and wl.headline[0] == "rpc_rate"


def test_records_carry_dims() -> None:
    m = metrics_of(parse_client(_read("client-micro-64conn-loopback.json")))
    assert m["rpc_rate"].unit == "transactions/s" and m["rpc_rate"].higher_is_better
    assert m["rpc_latency_p99_9"].base == "rpc_latency"
    assert m["rpc_latency_p99_9"].dims == {"q": 99.9}
    assert m["rpc_latency_std"].dims == {"stat": "std"}
    assert not m["rpc_latency_p50"].higher_is_better
    assert m["connections"].value == 64 and m["rpc_payload"].value > 0


def test_micro_udp_mix() -> None:
    """The loss-search `micro` size: the generator's --mix, its mean, accepted as a size."""
    from tunbench.workloads import loadgen, traffic
    spec = loadgen.TrafficSpec(size="micro")
    assert spec.mix_args() == ["--mix", traffic.NAMED_MIXES["micro"]]
    assert loadgen.TrafficSpec(size="128").mix_args() == ["--size", "128"]
    assert spec.profile().mean_size == pytest.approx(178.52)
    assert loadgen.TrafficSpec(size="imix").profile().mean_size == pytest.approx(4084 / 12)
    assert traffic.profile("micro", family=6).key == "micro"     # 64 B fits IPv6 too
    pairs = [tuple(map(int, p.split(":"))) for p in traffic.NAMED_MIXES["micro"].split(",")]
    small = sum(w for s, w in pairs if s <= 200) / sum(w for _, w in pairs)
    assert small == 0.9
    ls = get("loss-search")
    p = ls.parse_params({"sizes": ["64", "128", "200", "micro"]})
    assert p.sizes == ("64", "128", "200", "micro")
    with pytest.raises(SpecError,
                       match="must be \"imix\", \"micro\", \"mix\", \"genome\" or an IP total"):
        ls.parse_params({"sizes": ["mikro"]})


def test_microservice_preset() -> None:
    from tunbench import presets, spec
    from tunbench.plan import plan
    assert "microservice" in presets.names() and presets.describe("microservice")
    exp = spec.build(presets.load("microservice"), "preset microservice",
                     available={"native", "vxlan"})
    one_round = [c for c in plan(exp) if c.repeat == 1]
    rpc_conns = sorted(c.workload.params.connections for c in one_round
                       if c.workload.name == "rpc" and c.tunnel.kind == "native")
    assert rpc_conns == [1, 16, 64, 256]
    ls = [c for c in one_round if c.workload.name == "loss-search"]
    assert ls and ls[0].workload.params.sizes == ("64", "128", "200", "micro")
