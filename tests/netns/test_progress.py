"""Progress on stderr during real campaigns: plain lines when stderr is a pipe (also with
--json, stdout staying one JSON object), a redrawn live line on a pseudo-terminal that leaves
nothing behind, loss-search trials with their rates, and silence with --quiet."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tunbench.testbed import netlink
from tunbench.workloads import loadgen

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
ESC = "\x1b"
CASE = "0000-native-stream-mtu1500-r1"


def run_timed(argv: list[str], timeout: float) -> tuple[int, str, list[tuple[float, str]]]:
    """Run the CLI with stdout and stderr on pipes; stderr lines with the time each arrived."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    lines: list[tuple[float, str]] = []
    out = b""
    partial = b""
    t0 = time.monotonic()
    streams = {p.stdout.fileno(): "out", p.stderr.fileno(): "err"}
    while streams and time.monotonic() - t0 < timeout:
        ready, _, _ = select.select(list(streams), [], [], 1.0)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                del streams[fd]
            elif streams[fd] == "out":
                out += chunk
            else:
                partial += chunk
                *done, partial = partial.split(b"\n")
                lines += [(time.monotonic() - t0, d.decode()) for d in done]
    rc = p.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    assert not partial, f"stderr ended without a newline: {partial!r}"
    return rc, out.decode(), lines


def test_json_run_plain_progress_in_order(tmp_path: Path) -> None:
    """One stream case whose measurement (11 s) runs past the 10 s calm interval."""
    rc, out, timed = run_timed(TB + ["run", "--tunnels", "native", "--workloads", "stream",
                                     "--duration", "11", "--warmup", "1", "--repeats", "1",
                                     "--json", "--no-report", "--out", str(tmp_path / "c")],
                               timeout=120)
    lines = [text for _, text in timed]
    assert rc == 0, lines
    summary = json.loads(out)                      # stdout: one JSON object, nothing else
    assert summary["format"] == "tunbench-summary" and summary["failed_cases"] == []
    assert not any(ESC in line or "\r" in line for line in lines), lines
    assert re.fullmatch(r"tunbench: 1 case\(s\), about \d+ s \(estimated; refined as cases "
                        r"run\)", lines[0]), lines[0]
    expected = [f"tunbench: [1/1] {CASE}: start; ",
                f"tunbench: [1/1] {CASE}: bring-up: testbed and native tunnel; ",
                f"tunbench: [1/1] {CASE}: bring-up: ping through the native tunnel on site a; ",
                f"tunbench: [1/1] {CASE}: server start: iperf3 on site b; ",
                f"tunbench: [1/1] {CASE}: warm-up: iperf3, 1 TCP stream; ",
                f"tunbench: [1/1] {CASE}: measuring: iperf3, 1 TCP stream; ",
                f"tunbench: [1/1] {CASE}: teardown; ",
                f"[1/1] {CASE}: ok - throughput "]
    at = [next((i for i, line in enumerate(lines) if line.startswith(e)), None)
          for e in expected]
    assert None not in at and at == sorted(at), (at, lines)
    assert at[-1] == len(lines) - 1                # the case's result is the last line
    for line in lines[1:-1]:
        assert re.search(r"case \d+:\d\d, about \d+:\d\d left; campaign \d+:\d\d, about "
                         r"\d+:\d\d left$", line), line
    # the 11 s measurement is not silent: past the 10 s calm interval (report/live.py CALM_S)
    # a "still measuring" line comes, while the measurement runs (after its "measuring" line,
    # before teardown); how late each line arrives is the host's pace, not checked
    still = [i for i, line in enumerate(lines)
             if line.startswith(f"tunbench: [1/1] {CASE}: still measuring: iperf3, 1 TCP stream; ")]
    order = [at[5], *still, at[6]]   # measuring, each still-measuring line, teardown
    assert still and order == sorted(order), (order, lines)
    rid = json.loads(next((tmp_path / "c" / "cases").glob("*.json")).read_text())["case"]["run_id"]
    assert not [n for n in netlink.list_netns() if f"-{rid}-" in n]   # torn down


def read_pty_run(argv: list[str], cols: int, rows: int, timeout: float) -> tuple[int, str, bytes]:
    """Run the CLI with stderr on a pseudo-terminal of cols x rows, stdout on a pipe."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                         env=env)
    os.close(slave)
    assert p.stdout is not None
    raw, out = b"", b""
    fds = {master: "pty", p.stdout.fileno(): "out"}
    t0 = time.monotonic()
    while fds and time.monotonic() - t0 < timeout:
        ready, _, _ = select.select(list(fds), [], [], 0.5)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:            # the pty's other end closed (EIO)
                chunk = b""
            if not chunk:
                del fds[fd]
            elif fds[fd] == "pty":
                raw += chunk
            else:
                out += chunk
    os.close(master)
    return p.wait(timeout=10), out.decode(), raw


def test_terminal_redraws_in_place_and_leaves_only_finished_lines(tmp_path: Path) -> None:
    pyte = pytest.importorskip("pyte", reason="pyte (pinned in the test extras) is not "
                               "installed: pip install -e .[test]")
    cols, rows = 150, 40
    rc, out, raw = read_pty_run(TB + ["run", "--tunnels", "native,vxlan", "--workloads",
                                      "stream", "--duration", "2", "--warmup", "1",
                                      "--repeats", "1", "--json", "--no-report",
                                      "--out", str(tmp_path / "c")], cols, rows, timeout=150)
    assert rc == 0, raw[-2000:]
    assert json.loads(out)["failed_cases"] == []
    text = raw.decode()
    # redrawn in place: the live lines are erased and drawn again, several times per case
    redraws = text.count("\x1b[1A\x1b[2K")
    assert redraws >= 6, text[-2000:]
    # (a phase shorter than a redraw, such as a server start, may never be drawn)
    for live in ("[1/2] 0000-native-stream-mtu1500-r1 · measuring: iperf3, 1 TCP stream",
                 "[2/2] 0001-vxlan-stream-mtu1500-r1 · measuring: iperf3, 1 TCP stream"):
        assert live in text, live
    assert re.search(r"case 0:0\d, about 0:0\d left; campaign 0:\d\d, about 0:\d\d left", text)
    screen = pyte.Screen(cols, rows)
    pyte.ByteStream(screen).feed(raw)
    shown = [line.rstrip() for line in screen.display if line.strip()]
    assert len(shown) == 3, shown                 # the estimate and the two case results
    assert re.fullmatch(r"tunbench: 2 case\(s\), about \d+ s \(estimated; refined as cases "
                        r"run\)", shown[0]), shown
    assert shown[1].startswith("[1/2] 0000-native-stream-mtu1500-r1: ok - throughput ")
    assert shown[2].startswith("[2/2] 0001-vxlan-stream-mtu1500-r1: ok - throughput ")
    assert screen.cursor.x == 0 and "\x1b[?25h" in text   # cursor at a line start, visible


def test_quiet_clean_run_writes_nothing_to_stderr(tmp_path: Path) -> None:
    r = subprocess.run(TB + ["run", "--tunnels", "native", "--workloads", "ping",
                             "--duration", "1", "--warmup", "0", "--repeats", "1", "--json",
                             "--quiet", "--out", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert json.loads(r.stdout)["failed_cases"] == []
    assert (tmp_path / "c" / "report" / "index.html").exists()   # the report ran, silently


@pytest.mark.skipif(loadgen.find_binary() is None,
                    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})")
def test_loss_search_shows_each_trial_with_its_rate(tmp_path: Path) -> None:
    """RFC 2544 bisection from 150 kpps on a 200 Mbit/s underlay (about 69 kpps of 361 B
    packets): the first trial fails, the next ones halve the interval; 1 s trials."""
    exp = tmp_path / "e.toml"
    exp.write_text('[experiment]\nrepeats = 1\nduration = 1\nwarmup = 0\nrate = "200mbit"\n'
                   '[[tunnel]]\nkind = "native"\n'
                   '[[workload]]\nname = "loss-search"\nmethod = "rfc2544"\nsizes = ["361"]\n'
                   'max_rate_pps = 150000\nresolution_pct = 10\nlatency_at_pct = [50]\n')
    rc, out, timed = run_timed(TB + ["run", "--experiment", str(exp), "--json", "--no-report",
                                     "--out", str(tmp_path / "c")], timeout=180)
    lines = [text for _, text in timed]
    assert rc == 0, lines
    summary = json.loads(out)
    assert summary["failed_cases"] == []
    trial = re.compile(r"trial (\d+) of about (\d+): (rfc2544|latency-50pct), 361 B, "
                       r"([\d,]+) pps \(([\d.,]+) Mbit/s\); case ")
    found = [m for m in map(trial.search, lines) if m]
    nums = [int(m[1]) for m in found]
    assert nums == list(range(1, len(nums) + 1)) and len(nums) >= 4, lines
    rates = [float(m[4].replace(",", "")) for m in found]
    assert found[0][3] == "rfc2544" and rates[0] == 150000
    assert rates[1] == pytest.approx((150000 + 1000) / 2, abs=1)   # bisect [min, max]
    for m, pps in zip(found, rates, strict=True):
        assert float(m[5].replace(",", "")) == pytest.approx(pps * 361 * 8 / 1e6, rel=1e-3)
    assert found[-1][3] == "latency-50pct"
    doc = json.loads(next((tmp_path / "c" / "cases").glob("*.json")).read_text())
    assert len(doc["raw"]["sizes"]["361"]["trials"]) == len(found)   # one line per trial
    assert any("capture probe: 0.5 s at 2,000 pps" in line and "on site b" in line
               for line in lines) or doc["raw"]["receiver"]["mode"] == "socket"


def test_reader_of_stderr_gone_the_run_goes_on(tmp_path: Path) -> None:
    """`tunbench run --json 2>&1 >out | head -1`-like: the progress pipe closes after the first
    line; the display stops, the case and the JSON summary do not."""
    p = subprocess.Popen(TB + ["run", "--tunnels", "native", "--workloads", "ping",
                               "--duration", "2", "--warmup", "0", "--repeats", "1", "--json",
                               "--no-report", "--out", str(tmp_path / "c")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stderr is not None and p.stdout is not None
    assert p.stderr.readline().startswith(b"tunbench: 1 case(s), about ")
    p.stderr.close()
    out = p.stdout.read()
    assert p.wait(timeout=120) == 0
    assert json.loads(out)["failed_cases"] == []
    doc = json.loads(next((tmp_path / "c" / "cases").glob("*.json")).read_text())
    assert doc["status"] == "ok" and doc["metrics"]["rtt_avg"]["value"] > 0
