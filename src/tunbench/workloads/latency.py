"""latency: request/response round-trip times with sockperf ping-pong, over TCP and/or UDP.

The study measured RTT with netperf TCP_RR (min, p50, p90, p99, max) and plotted the CDF of
every RTT (Fig. 2, 7, 16). Here sockperf ping-pong runs with --full-rtt (sockperf otherwise
reports half the round trip) and --full-log, which dumps every sample: tunbench reads them
all, drops the warm-up, computes min/p50/p90/p99/p99.9/max/mean itself (nearest rank, as
sockperf does) and keeps the distribution as 1001+ quantiles (a bounded CDF) in raw.cdf.
sockperf's own printed summary is parsed too and kept next to it (it covers its own window).

The sockperf server runs in site b for this measurement only (`sockperf sr`), is ready when
its socket is bound (checked with ss, not by sleeping), and is stopped by PID.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .. import ports
from ..errors import CommandFailed
from ..proc import Process
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem

LOG_DIR = "/var/tmp"           # disk-backed by convention (FHS), unlike /run
PORT_OFFSET = ports.SOCKPERF_OFFSET   # sockperf port = ctx.port_base + this
SOCKPERF_WARMUP = 0.4         # sockperf's own warm-up, already excluded from its full log
# before that, the client's "Warmup stage (sending a few dummy messages)" and a pause: its
# test starts ~2 s after it does (captured: a UDP client's first packet 2.0-2.2 s after its
# start, a TCP client's first logged sample 2.4 s after, its warm-up included), and it ends
# -t seconds after that; so a ping-pong of -t N holds the wire ~N + 2 s
SOCKPERF_STARTUP = 2.0
STATS = (("min", None), ("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9),
         ("max", None), ("mean", None))


def rtt_dims(name: str) -> dict[str, Any]:
    """The result dims of one of STATS: {"q": 99.9} for a percentile, {"stat": "min"} else."""
    q = dict(STATS)[name]
    return {"q": q} if q is not None else {"stat": name}


CDF_LEVELS = tuple(i / 10 for i in range(1001)) + (99.95, 99.99, 99.995, 99.999)


MAX_MPS = 10_000_000   # messages per second: beyond any ping-pong a host can do


@dataclass(frozen=True)
class LatencyParams(WorkloadParams):
    # tcp by default: the study's figure (netperf TCP_RR) and the one rankings judge latency
    # by (tcp_rtt_p50); each protocol costs a whole sockperf run (its client sleeps 2 s after
    # its warm-up whatever -t is), so "both" doubles a latency case (docs/methodology.md,
    # "What a latency case costs")
    protocol: Literal["tcp", "udp", "both"] = field(
        default="tcp",
        metadata={"help": "tcp (default), udp or both: which sockperf ping-pong runs"})
    msg_size: int = field(
        default=64,
        metadata={"help": "bytes per request and per reply (sockperf -m)"})
    mps: int = field(
        default=0,
        metadata={"help": "messages per second; 0 = as fast as replies come (like TCP_RR)"})

    def validate(self) -> list[str]:
        problems = []
        if not 14 <= self.msg_size <= 65000:
            problems.append(f"msg_size {self.msg_size} out of range (14..65000, sockperf's)")
        if not 0 <= self.mps <= MAX_MPS:
            problems.append(f"mps {self.mps} out of range (0..{MAX_MPS}; 0 = max)")
        return problems

    def protocols(self) -> tuple[str, ...]:
        return ("tcp", "udp") if self.protocol == "both" else (self.protocol,)


def server_argv(proto: str, addr: str, port: int) -> list[str]:
    return ["sockperf", "sr", *(["--tcp"] if proto == "tcp" else []), "-i", addr,
            "-p", str(port)]


def client_argv(proto: str, addr: str, port: int, seconds: int, p: LatencyParams,
                log: Path) -> list[str]:
    argv = ["sockperf", "pp", *(["--tcp"] if proto == "tcp" else []), "-i", addr,
            "-p", str(port), "-t", str(seconds), "-m", str(p.msg_size), "--full-rtt",
            "--full-log", str(log)]
    if p.mps:
        argv.append(f"--mps={p.mps}")
    return argv


def _parse_rows(block: bytes) -> np.ndarray:
    """Sample lines 'i, tx, rx, rtt' (only those) -> an (n, 4) array."""
    lines = [ln for ln in block.split(b"\n") if ln[:1].isdigit() and ln.count(b",") == 3]
    if not lines:
        return np.zeros((0, 4))
    vals = np.fromstring(b" ".join(lines).replace(b",", b" ").decode("ascii"),  # noqa: NPY201
                         dtype=float, sep=" ")
    return vals.reshape(-1, 4)


def read_full_log(path: Path, chunk_bytes: int = 8 << 20) -> tuple[np.ndarray, np.ndarray]:
    """sockperf --full-log CSV -> (tx times in s, RTTs in µs), read in bounded chunks (a 100 s
    run logs millions of samples; memory stays at the arrays plus one chunk)."""
    txs: list[np.ndarray] = []
    rtts: list[np.ndarray] = []
    rest = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(chunk_bytes)
            if not chunk:
                break
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            rows, rest = _parse_rows(data[:cut]), data[cut:]
            txs.append(rows[:, 1])
            rtts.append(rows[:, 3])
    if rest:
        rows = _parse_rows(rest)
        txs.append(rows[:, 1])
        rtts.append(rows[:, 3])
    if not rtts:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(txs), np.concatenate(rtts)


def nearest_rank(sorted_vals: np.ndarray, pct: float) -> float:
    """Nearest-rank percentile of sorted values (the smallest value with >= pct% at or below)."""
    n = len(sorted_vals)
    k = max(1, math.ceil(pct / 100.0 * n))
    return float(sorted_vals[min(k, n) - 1])


def rtt_stats(tx: np.ndarray, rtt: np.ndarray, skip: float, duration: float) -> dict[str, Any]:
    """Figures of the samples sent in [first + skip, first + skip + duration]."""
    if len(rtt) == 0:
        raise CommandFailed("sockperf logged no round trip", "see the case's error_log")
    t0 = float(tx[0]) + skip
    keep = (tx >= t0) & (tx <= t0 + duration)
    if not keep.any():
        keep = np.ones(len(rtt), dtype=bool)
    vals = np.sort(rtt[keep])
    out: dict[str, Any] = {}
    for name, pct in STATS:
        if name == "min":
            out[name] = float(vals[0])
        elif name == "max":
            out[name] = float(vals[-1])
        elif name == "mean":
            out[name] = float(vals.mean())
        else:
            out[name] = nearest_rank(vals, float(pct))   # type: ignore[arg-type]
    out["std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
    out["samples"] = int(len(vals))
    out["dropped_outside_window"] = int(len(rtt) - len(vals))
    out["seconds"] = float(tx[keep][-1] - tx[keep][0]) if len(vals) > 1 else 0.0
    out["rate"] = out["samples"] / out["seconds"] if out["seconds"] else None
    out["cdf"] = {"pct": list(CDF_LEVELS),
                  "rtt_us": [nearest_rank(vals, p) if p > 0 else float(vals[0])
                             for p in CDF_LEVELS]}
    # per-second median, for a series
    sec = np.floor(tx[keep] - t0).astype(int)
    kept = rtt[keep]
    out["series_p50"] = [float(np.median(kept[sec == s])) for s in range(int(sec.max()) + 1)
                         if (sec == s).any()]
    return out


_SUMMARY = re.compile(r"---> (?:percentile (?P<pct>[\d.]+)|<(?P<ext>MAX|MIN)> observation)"
                      r"\s*=\s*(?P<v>[\d.]+)")


def parse_sockperf(text: str) -> dict[str, Any]:
    """sockperf pp's printed summary (first block) -> figures (µs); pure, tested on captures."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    out: dict[str, Any] = {}
    m = re.search(r"avg-(rtt|lat)=([\d.]+) \(std-dev=([\d.]+)\)", text)
    if not m:
        raise CommandFailed("sockperf printed no results", "run sockperf by hand to see why")
    out["full_rtt"] = m.group(1) == "rtt"
    out["mean"], out["std"] = float(m.group(2)), float(m.group(3))
    block = text[m.start():].split("------------------------------")[0]
    for g in _SUMMARY.finditer(block):
        key = g.group("ext").lower() if g.group("ext") else f"p{g.group('pct')}"
        out.setdefault(key, float(g.group("v")))
    m = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+); "
                  r"ReceivedMessages=(\d+)", text)
    if m:
        out["seconds"], out["sent"], out["received"] = (float(m.group(1)), int(m.group(2)),
                                                        int(m.group(3)))
    m = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                  r"# out-of-order messages = (\d+)", text)
    if m:
        out["dropped"], out["duplicated"], out["out_of_order"] = map(int, m.groups())
    m = re.search(r"Total (\d+) observations", text)
    if m:
        out["observations"] = int(m.group(1))
    return out


def wait_bound(ctx: Context, server: Process, proto: str, port: int,
               timeout: float = 5.0) -> None:
    """Ready when site b has a socket bound to the port (ss), not after a sleep."""
    import time
    flag = "-t" if proto == "tcp" else "-u"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = ctx.server.run(["ss", "-Hln", flag, "sport", "=", f":{port}"], check=False,
                           timeout=5)
        if r.ok and r.stdout.strip():
            return
        if server.poll() is not None:
            break
        time.sleep(0.02)
    raise CommandFailed(f"sockperf server ({proto}) did not bind port {port} within "
                        f"{timeout:g}s: {server.log_tail(3) or 'no output'}", argv=server.argv)


def rtt_metrics(prefix: str, base: str, st: dict[str, Any],
                dims: dict[str, Any] | None = None) -> dict[str, Metric]:
    """STATS plus the standard deviation as metric records: `{prefix}_{stat}` with base `base`
    (e.g. tcp_rtt_p99, dims {"q": 99.0}); `dims` are added to every record (a sweep point)."""
    extra = dims or {}
    out = {f"{prefix}_{name}": Metric(st[name], "µs", False, base=base,
                                      dims={**rtt_dims(name), **extra}) for name, _ in STATS}
    # the study's way of reporting delay: mean ± standard deviation of the samples
    out[f"{prefix}_std"] = Metric(st["std"], "µs", False, base=base,
                                  dims={"stat": "std", **extra})
    return out


def ping_pong(ctx: Context, proto: str, params: LatencyParams, logdir: Path,
              cpu: Any = None, label: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """One sockperf ping-pong against site b's bound server over ctx.duration (+ warm-up): the
    figures of every sample in the window (rtt_stats) and sockperf's printed summary."""
    addr = ctx.server_addr()
    port = ctx.port_base + PORT_OFFSET
    skip = max(0.0, ctx.warmup - SOCKPERF_WARMUP)
    seconds = math.ceil(ctx.duration + ctx.warmup + 0.1)   # sockperf measures t - ~0.45 s
    log = logdir / f"sockperf-{proto}{label}.csv"
    # the client writes its full log on its own host: on a remote site into the case
    # directory there, fetched here once it is done
    site_log = ctx.tb.site_dir(ctx.client) / log.name if ctx.client.remote else log
    client = ctx.tb.spawn(ctx.client, client_argv(proto, addr, port, seconds, params, site_log),
                          f"sockperf-client-{proto}{label}")
    if cpu is not None:
        cpu.track(client.pid, f"sockperf-client-{proto}{label}")
    rc = client.wait(timeout=seconds + 60)
    if rc != 0:
        raise CommandFailed(f"sockperf client ({proto}) exited {rc}: {client.log_tail(2)}",
                            argv=client.argv)
    printed = parse_sockperf(client.output())
    if ctx.client.remote:
        log.write_bytes(ctx.client.read_file(site_log))
    tx, rtt = read_full_log(log)
    log.unlink(missing_ok=True)
    return rtt_stats(tx, rtt, skip, ctx.duration), printed


def private_logdir(ctx: Context) -> Path:
    """A 100 s run logs millions of samples (~40 bytes each): keep the log off /run (often a
    small tmpfs) in a private directory on disk, removed with the case."""
    logdir = Path(tempfile.mkdtemp(prefix=f"tunbench-{ctx.tb.run_id}-", dir=LOG_DIR))
    ctx.tb.ledger.path(logdir)
    return logdir


class Latency(Workload[LatencyParams]):
    name = "latency"
    summary = ("request/response RTT distribution (sockperf ping-pong, --full-rtt), TCP; "
               "UDP with protocol=udp|both")
    Params = LatencyParams
    tools = ("sockperf",)   # and ss, from iproute2 like ip
    headline = ("tcp_rtt_p50", "udp_rtt_p50", "tcp_rtt_p99", "udp_rtt_p99", "tcp_rtt_mean",
                "tcp_rtt_std", "udp_rtt_mean", "udp_rtt_std")

    @classmethod
    def expected_seconds(cls, params: LatencyParams, duration: float, warmup: float) -> float:
        return len(params.protocols()) * (math.ceil(duration + warmup) + 2.0)

    def unsupported(self, ctx: Context, params: LatencyParams) -> str | None:
        if "udp" in params.protocols():
            return relay_problem(ctx, not_tcp="UDP (sockperf)")
        return relay_problem(ctx, tcp_ports=[ctx.port_base + PORT_OFFSET])

    def run(self, ctx: Context, params: LatencyParams) -> Output:
        addr = ctx.server_addr()
        port = ctx.port_base + PORT_OFFSET
        out = Output()
        skip = max(0.0, ctx.warmup - SOCKPERF_WARMUP)
        seconds = math.ceil(ctx.duration + ctx.warmup + 0.1)   # sockperf measures t - ~0.45 s
        logdir = private_logdir(ctx)
        protos = params.protocols()
        with ctx.measuring() as cpu:
            for i, proto in enumerate(protos):
                ctx.phase("server start", f"sockperf {proto}", site=ctx.server)
                server = ctx.tb.spawn(ctx.server, server_argv(proto, addr, port),
                                      f"sockperf-server-{proto}")
                try:
                    wait_bound(ctx, server, proto, port)
                    cpu.track(server.pid, f"sockperf-server-{proto}")
                    ctx.phase("measuring", f"sockperf {proto} ping-pong ({i + 1} of "
                              f"{len(protos)})", expected_s=seconds,
                              remaining_s=(len(protos) - i) * (seconds + 2.0),
                              warmup_s=ctx.warmup)
                    st, printed = ping_pong(ctx, proto, params, logdir, cpu)
                finally:
                    server.stop()
                out.metrics.update(rtt_metrics(f"{proto}_rtt", f"{proto}_rtt", st))
                out.metrics[f"{proto}_rate"] = Metric(st["rate"], "transactions/s")
                out.series[f"{proto}_rtt_p50"] = st.pop("series_p50")
                out.raw[proto] = {"stats": {k: v for k, v in st.items() if k != "cdf"},
                                  "cdf": st["cdf"], "sockperf_summary": printed}
        out.raw["params"] = {"msg_size": params.msg_size, "full_rtt": True,
                             "warmup_skipped_s": skip + SOCKPERF_WARMUP}
        return out


WORKLOAD = Latency
