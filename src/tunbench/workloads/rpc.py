"""rpc: small-message request/response over many TCP connections, like microservice RPCs.

Cluster-to-cluster traffic is mostly RPCs with most packets under 200 bytes, where a tunnel's
50-60 byte header weighs most. sockperf ping-pong (the latency workload) has one connection and
one fixed size; this workload drives `connections` closed-loop connections (one request
outstanding each, like a pool of RPC stubs) with request and response sizes drawn from a
weighted mix of size ranges, and reports transactions/s, the latency distribution
(p50/p90/p99/p99.9, mean ± std, min/max) and, as every workload, CPU per core.

The generator is the load generator's second binary, `tunbench-rpc` (loadgen/src/bin/
tunbench-rpc/): std threads with nonblocking sockets and poll(2), a length-prefixed frame so
no serialisation library is measured. Its server runs in site b for this case only, is ready
when it prints `ready` (its socket is listening), ends by itself once the client's connections
have closed, and is stopped by PID on any exit. Sizes are message bytes including the 8-byte
request / 4-byte response header. Building argv, running and parsing are separate;
`parse_client` is pure and tested on a captured run (tests/data/rpc/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .. import proc, rustbin
from ..capabilities import Missing
from ..errors import CommandFailed
from ..testbed.base import Site, Testbed
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem

BINARY = "tunbench-rpc"
ENV = "TUNBENCH_RPC"
BUILD_FIX = rustbin.build_fix(ENV)
PORT_OFFSET = 0               # server port = ctx.port_base + this: the first port a
                              # stream relay (ssh-forward) forwards; one server at a time
MIN_SIZE, MAX_SIZE = 8, 1 << 20
MAX_CONNECTIONS = 65_536
# The microservice mix: 70% small (64-128 B), 25% medium (200-512 B), 5% large (1-4 KB).
MIXES = {"micro": "64-128:70,200-512:25,1024-4096:5"}
STATS = (("min", None), ("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9),
         ("max", None), ("mean", None), ("std", None))
_PART = re.compile(r"^(\d+)(?:-(\d+))?(?::(\d+))?$", re.ASCII)
MAX_WEIGHT = 1_000_000


def parse_mix(spec: str) -> list[tuple[int, int, int]]:
    """'64-128:70,200-512:25' (or a name in MIXES) -> [(low, high, weight)] (pure).

    The same grammar the generator accepts, checked here so a bad mix is refused in one line
    before anything runs. Raises ValueError naming the part and the accepted form."""
    spec = MIXES.get(spec.strip(), spec)
    parts = []
    for part in (p.strip() for p in spec.split(",")):
        m = _PART.match(part)
        if not m:
            raise ValueError(f"size mix part {part!r} is not SIZE, LOW-HIGH or LOW-HIGH:WEIGHT "
                             f"(e.g. \"{MIXES['micro']}\" or \"micro\")")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        weight = int(m.group(3) or 1)
        if not (MIN_SIZE <= lo <= MAX_SIZE and MIN_SIZE <= hi <= MAX_SIZE):
            raise ValueError(f"size mix part {part!r}: sizes must be {MIN_SIZE}..{MAX_SIZE} "
                             "bytes (a message includes its 8-byte header)")
        if lo > hi:
            raise ValueError(f"size mix part {part!r}: range is reversed (write {hi}-{lo})")
        if weight == 0:
            raise ValueError(f"size mix part {part!r}: weight 0 (leave the part out)")
        if weight > MAX_WEIGHT:
            raise ValueError(f"size mix part {part!r}: weight above {MAX_WEIGHT:,} (weights "
                             "are proportions: 70, not 70000000)")
        parts.append((lo, hi, weight))
    return parts


def mix_mean(parts: list[tuple[int, int, int]]) -> float:
    return sum((lo + hi) / 2 * w for lo, hi, w in parts) / sum(w for *_, w in parts)


@dataclass(frozen=True)
class RpcParams(WorkloadParams):
    connections: int = field(
        default=64,
        metadata={"help": "concurrent TCP connections, each with one request outstanding; a "
                  "list in an experiment = one case per value"})
    mix: str = field(
        default="micro",
        metadata={"help": "request sizes: \"micro\" (64-128:70,200-512:25,1024-4096:5) or "
                  "LOW-HIGH:WEIGHT,... in bytes incl. the 8-byte header"})
    response_mix: str = field(
        default="",
        metadata={"help": "response sizes, same form; empty = the request mix"})
    threads: int = field(
        default=0,
        metadata={"help": "generator threads per end; 0 = one per CPU (at most 4)"})

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.connections <= MAX_CONNECTIONS:
            problems.append(f"connections {self.connections} out of range "
                            f"(1..{MAX_CONNECTIONS})")
        for name in ("mix", "response_mix"):
            value = getattr(self, name)
            if name == "response_mix" and not value:
                continue
            try:
                parse_mix(value)
            except ValueError as e:
                problems.append(f"{name}: {e}")
        if not 0 <= self.threads <= 64:
            problems.append(f"threads {self.threads} out of range (0..64; 0 = one per CPU)")
        return problems

    def mix_spec(self) -> str:
        return MIXES.get(self.mix, self.mix)

    def response_spec(self) -> str:
        return MIXES.get(self.response_mix, self.response_mix) or self.mix_spec()


def find_binary() -> str | None:
    return rustbin.find(BINARY, ENV)


def binary_missing() -> Missing | None:
    return rustbin.missing(BINARY, ENV)


def binary_on(tb: Testbed, site: Site) -> str:
    """The generator as `site` runs it (rustbin.on_site: ours, or copied to a host)."""
    return rustbin.on_site(tb, site, BINARY, ENV, "rpc_copied_to")


def server_argv(binary: str, addr: str, port: int, p: RpcParams,
                max_seconds: float = 0.0) -> list[str]:
    """`max_seconds`: a bound on the server's life should nothing stop it (0 = none)."""
    return [binary, "server", "--bind", addr, "--port", str(port), "--threads", str(p.threads),
            "--max-seconds", f"{max_seconds:g}"]


def client_argv(binary: str, addr: str, port: int, p: RpcParams, duration: float,
                warmup: float) -> list[str]:
    return [binary, "client", "--dst", addr, "--port", str(port),
            "--connections", str(p.connections), "--threads", str(p.threads),
            "--mix", p.mix_spec(), "--response-mix", p.response_spec(),
            "--duration", f"{duration:g}", "--warmup", f"{warmup:g}"]


def _json_object(text: str, role: str) -> dict[str, Any]:
    return rustbin.json_result(text, BINARY, role)


def parse_client(text: str) -> dict[str, Any]:
    """The client's figures (pure): rate, latency in µs, per-second counts, sizes."""
    d = _json_object(text, "client")
    lat = d.get("latency_us") or {}
    if not d.get("transactions") or lat.get("p50") is None:
        raise CommandFailed(f"{BINARY} completed no transaction in its measurement window "
                            f"({d.get('connected', 0)} of {d.get('connections')} connections "
                            "open)", "check the path with the ping workload")
    return {
        "tx_per_s": float(d["tx_per_s"]), "transactions": int(d["transactions"]),
        "connections": int(d["connections"]), "connected": int(d["connected"]),
        "threads": int(d["threads"]), "duration_s": float(d["duration_s"]),
        "latency_us": {name: float(lat[name]) for name, _ in STATS},
        "samples": int(lat["samples"]), "per_second": [int(x) for x in d["per_second"]],
        "request_bytes": int(d["request_bytes"]), "response_bytes": int(d["response_bytes"]),
        "mean_request": float(d["mix"]["mean_size"]),
        "mean_response": float(d["response_mix"]["mean_size"]),
        "conn_errors": int(d["conn_errors"]), "framing_errors": int(d["framing_errors"]),
        "connect_errors": int(d["connect_errors"]),
    }


def parse_server(text: str) -> dict[str, Any]:
    """The server's totals (pure); they cover warm-up and drain too."""
    d = _json_object(text, "server")
    return {k: d.get(k) for k in ("accepted", "transactions", "bytes_in", "bytes_out",
                                  "framing_errors", "seconds", "stop_reason")}


def metrics_of(c: dict[str, Any]) -> dict[str, Metric]:
    """Result records: rpc_rate, rpc_latency_<stat> with dims, payload goodput, connections."""
    out = {"rpc_rate": Metric(c["tx_per_s"], "transactions/s")}
    for name, q in STATS:
        out[f"rpc_latency_{name}"] = Metric(c["latency_us"][name], "µs", False,
                                            base="rpc_latency",
                                            dims={"q": q} if q is not None else {"stat": name})
    mbit = (c["request_bytes"] + c["response_bytes"]) * 8 / 1e6 / c["duration_s"]
    out["rpc_payload"] = Metric(mbit, "Mbit/s")   # both directions, window incl. its edges
    out["connections"] = Metric(c["connected"], "connections")
    return out


class Rpc(Workload[RpcParams]):
    name = "rpc"
    summary = ("small-message RPC over many TCP connections (tunbench-rpc): transactions/s, "
               "latency p50..p99.9, mean±std; sizes from a microservice mix")
    Params = RpcParams
    headline = ("rpc_rate", "rpc_latency_p50", "rpc_latency_p99")
    sweep = "connections"

    @classmethod
    def requirements(cls, params: RpcParams) -> list[Missing]:
        m = binary_missing()
        return [m] if m else []

    @classmethod
    def expected_seconds(cls, params: RpcParams, duration: float, warmup: float) -> float:
        return duration + warmup + 1.5

    def unsupported(self, ctx: Context, params: RpcParams) -> str | None:
        return relay_problem(ctx, tcp_ports=[ctx.port_base + PORT_OFFSET])

    def run(self, ctx: Context, params: RpcParams) -> Output:
        addr = ctx.server_addr()
        port = ctx.port_base + PORT_OFFSET
        ctx.phase("server start", f"{BINARY} server", site=ctx.server)
        bound = ctx.duration + ctx.warmup + 90   # the client's own limit is 60 s past its run
        server = ctx.tb.spawn(ctx.server, server_argv(binary_on(ctx.tb, ctx.server), addr,
                                                      port, params, bound),
                              "rpc-server", split_stderr=True, grace=1.0)
        client = None
        try:
            proc.wait_ready(server, ready=lambda: "ready" in server.errors().split(),
                            timeout=10)
            argv = client_argv(binary_on(ctx.tb, ctx.client), addr, port, params,
                               ctx.duration, ctx.warmup)
            with ctx.measuring() as cpu:
                cpu.track(server.pid, "rpc-server")
                ctx.phase("measuring", f"{params.connections} RPC connections",
                          expected_s=ctx.duration + ctx.warmup, warmup_s=ctx.warmup)
                client = ctx.tb.spawn(ctx.client, argv, "rpc-client", split_stderr=True,
                                      grace=1.0)
                cpu.track(client.pid, "rpc-client")
                rc = client.wait(timeout=ctx.duration + ctx.warmup + 60)
            if rc != 0:
                raise CommandFailed(f"{BINARY} client exited {rc}: {client.log_tail(2)}",
                                    argv=client.argv)
            figures = parse_client(client.output())
            try:
                server.wait(timeout=5)
                served = parse_server(server.output())
            except CommandFailed:
                served = None
        finally:
            for p in (client, server):
                if p is not None:
                    p.stop(grace=1.0)
        out = Output(metrics=metrics_of(figures),
                     series={"rpc_rate": [float(x) for x in figures["per_second"]]},
                     raw={"client": figures, "server": served,
                          "params": {"mix": params.mix_spec(),
                                     "response_mix": params.response_spec()}})
        if figures["connected"] < params.connections:
            out.notes.append(f"only {figures['connected']} of {params.connections} "
                             f"connections opened ({figures['connect_errors']} failed)")
        if figures["conn_errors"] or figures["framing_errors"]:
            out.notes.append(f"{figures['conn_errors']} connection(s) broke and "
                             f"{figures['framing_errors']} response(s) were malformed "
                             "during the run")
        return out


WORKLOAD = Rpc
