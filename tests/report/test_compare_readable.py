"""`tunbench compare` as a person and a CI read it, on recorded campaigns (tests/data/campaigns,
copied): readable at 80 columns in a real pseudo-terminal, headline metrics first and the rest
folded, COLUMNS honoured when piped, --wide with everything, Markdown for a CI comment, and an
HTML page with the overlay figure of both campaigns."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

from rich.cells import cell_len

import cli_inproc
from tunbench.report import compare, compare_view

TB = [sys.executable, "-m", "tunbench"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def in_pty(argv: list[str], cols: int = 80) -> tuple[int, list[str]]:
    """Run tunbench ARGV on a real pseudo-terminal COLS wide (no COLUMNS in its environment):
    its exit status and the lines the terminal got, escape sequences removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([*TB, *argv], stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:     # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    code = proc.wait(timeout=120)
    text = ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")
    return code, text.splitlines()


def piped(argv: list[str], columns: str | None) -> subprocess.CompletedProcess[str]:
    """compare's output to a pipe (not a terminal) with COLUMNS set or unset: cli.main in this
    process (cli_inproc); in_pty runs the real CLI on a terminal."""
    return cli_inproc.tunbench(*argv, env={"COLUMNS": columns})


def _fits(lines: list[str], cols: int) -> None:
    wide = [ln for ln in lines if cell_len(ln.rstrip()) > cols]
    assert not wide, wide
    assert not any("…" in ln for ln in lines), "a cell was cut short"


def test_compare_fits_80_columns_in_a_terminal(campaign: Callable[[str], Path]) -> None:
    a, b = campaign("idle"), campaign("busy")
    code, lines = in_pty(["compare", str(a), str(b)])
    assert code == 0, lines
    _fits(lines, 80)
    text = "\n".join(lines)
    # headline first (throughput, retransmits), then CPU; the other metrics folded
    at = [text.index(m) for m in ("Throughput", "TCP retransmits", "CPU busy (", "CPU per Gbit/s")]
    assert at == sorted(at)
    assert "iperf3 client CPU" not in text.split("folded")[0]
    assert re.search(r"4 more metric\(s\) with no significant change folded: CPU busy, max; "
                     r"CPU busy,\s+min; iperf3 client CPU; iperf3 server CPU", text)
    rows = [ln.split() for ln in lines]
    assert any(r[:1] == ["vxlan"] and "93.3%" in r and "114.7%" in r for r in rows), text
    assert "no significant regression beyond 0%" in text


def test_long_tunnel_names_wrap_never_cut(campaign: Callable[[str], Path],
                                          tmp_path: Path) -> None:
    a = campaign("kinds")
    b = shutil.copytree(a, tmp_path / "kinds-again")
    code, lines = in_pty(["compare", str(a), str(b)])
    assert code == 0
    _fits(lines, 80)
    text = "\n".join(lines)
    for name in ("wireguard (go)", "vxlan", "native"):
        assert name in text
    assert re.search(r"ovs-vxlan\s.*\n.*\(netdev\)", text) or "ovs-vxlan (netdev)" in text


def test_scenarios_in_numeric_order(campaign: Callable[[str], Path], tmp_path: Path) -> None:
    a = campaign("encrypted-streams")
    b = shutil.copytree(a, tmp_path / "again")
    r = piped(["compare", str(a), str(b)], "80")
    titles = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("stream ")]
    assert titles == ["stream streams=1, MTU 1500", "stream streams=4, MTU 1500",
                      "stream streams=16, MTU 1500"]


def test_columns_honoured_when_piped(campaign: Callable[[str], Path]) -> None:
    a, b = campaign("idle"), campaign("busy")
    narrow = piped(["compare", str(a), str(b)], "80")
    _fits(narrow.stdout.splitlines(), 80)
    default = piped(["compare", str(a), str(b)], None)     # a CI log: at most 100
    _fits(default.stdout.splitlines(), 100)
    assert narrow.returncode == default.returncode == 0
    wide = piped(["compare", str(a), str(b), "--wide"], "80")
    assert wide.returncode == 0
    for col in ("A mean ± CI", "change of share", "iperf3 client CPU"):  # everything
        assert col.split()[0] in wide.stdout, col
    assert wide.stdout.index("Throughput") < wide.stdout.index("iperf3 client CPU")


def test_a_significant_change_in_a_detail_metric_is_never_folded(
        campaign: Callable[[str], Path]) -> None:
    """B: basic with vxlan's iperf3 server CPU ten times higher: a detail metric, shown
    because it regressed."""
    a = campaign("basic")
    b = shutil.copytree(a, a.parent / "busy-server")
    for p in (b / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        if d["case"]["tunnel"]["kind"] == "vxlan":
            d["metrics"]["iperf3_cpu_server"]["value"] *= 10
            p.write_text(json.dumps(d))
    res = compare.run(a, b)
    (sec,) = compare_view.sections(res)
    shown = [(c.tunnel, c.metric) for c in sec.main + sec.details]
    assert ("vxlan", "iperf3_cpu_server") in shown
    assert all(c.verdict not in (compare.REGRESSED, compare.IMPROVED) for c in sec.folded)
    r = piped(["compare", str(a), str(b)], "80")
    assert r.returncode == 1 and "REGRESSED" in r.stdout and "iperf3 server CPU" in r.stdout


def test_markdown_for_a_ci_comment(campaign: Callable[[str], Path]) -> None:
    a, b = campaign("idle"), campaign("busy")
    r = piped(["compare", str(a), str(b), "--format", "md"], None)
    assert r.returncode == 0
    md = r.stdout
    assert md.startswith("### ✅ tunbench compare")
    assert "| metric | tunnel | A → B | change | verdict |" in md
    assert "| vxlan | 93.3% → 114.7%<br><sub>7,079 → 5,801</sub> | +23.0% |" in md
    assert "<details><summary>4 more metric(s) with no significant change folded" in md
    assert "> no significant regression beyond 0%" in md
    assert "\x1b[" not in md


def test_html_page_with_the_overlay_figure(campaign: Callable[[str], Path],
                                           tmp_path: Path) -> None:
    a, b = campaign("idle"), campaign("busy")
    page = tmp_path / "cmp.html"
    r = piped(["compare", str(a), str(b), "--html", str(page)], "80")
    assert r.returncode == 0 and "A → B" in r.stdout          # the text view as well
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<h2>stream, MTU 1500</h2>" in html
    (b64,) = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    svg = base64.b64decode(b64).decode()
    for label in ("native (A)", "native (B)", "vxlan (A)", "vxlan (B)"):
        assert label in svg, label
    assert "Throughput, stream, MTU 1500" in svg
    same = piped(["compare", str(a), str(b), "--format", "html"], None)
    assert same.stdout.startswith("<!doctype html>") and same.returncode == 0
    bad = piped(["compare", str(a), str(b), "--html", str(tmp_path)], None)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "is a folder, not a file" in bad.stderr and bad.stdout == ""
