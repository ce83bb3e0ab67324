"""A campaign run with -R or --bidir says so wherever it is read: the report's scenarios, the
console summary's titles and compare's sections name the direction (`stream reverse`), and a
reversed case is never pooled with forward ones. On a copy of a recorded campaign whose stream
cases are marked as iperf3 -R would have recorded them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tunbench.report import console, data
from tunbench.results import reader

TB = [sys.executable, "-m", "tunbench"]


def _mark(root: Path, key: str, only_repeat: int | None = None) -> Path:
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        if only_repeat is None or d["case"]["repeat"] == only_repeat:
            d["case"]["workload"]["params"][key] = True
            p.write_text(json.dumps(d))
    return root


def test_reverse_is_named_in_scenarios_console_and_compare(
        campaign: Callable[[str], Path], capsys) -> None:
    a = _mark(campaign("basic"), "reverse")
    c = data.load(a)
    assert {s[0] for s in c.scenarios()} == {"stream reverse"}
    console.print_summary(reader.read_campaign(a).cases, str(a))
    out = capsys.readouterr().out
    assert "stream reverse - underlay MTU 1500" in out
    r = subprocess.run([*TB, "compare", str(a), str(a)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "stream reverse, MTU 1500" in r.stdout


def test_bidir_and_forward_never_pooled(campaign: Callable[[str], Path]) -> None:
    a = _mark(campaign("basic"), "bidir", only_repeat=1)
    c = data.load(a)
    assert [s[0] for s in c.scenarios()] == ["stream", "stream bidir"]
    n = {r.workload: r.stats.n for r in c.rows if (r.tunnel, r.metric) == ("vxlan",
                                                                           "throughput")}
    assert n == {"stream": 2, "stream bidir": 1}
