"""A live small campaign records each tunnel's resolved implementation and encryption in its
case files, and the console, the HTML report and the CSV name the implementation."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kinds_here import skip_unless_here
from tunbench import tunnels

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
KINDS = ("native", "wireguard", "ssh-tun")


def test_cases_record_impl_and_the_report_names_it(tmp_path: Path, root_unchanged: None) -> None:
    for kind in KINDS:
        skip_unless_here(kind)
    wg = tunnels.get("wireguard")
    impl = wg.resolve_impl(wg.default_params())
    out = tmp_path / "camp"
    r = subprocess.run(TB + ["run", "--tunnels", ",".join(KINDS), "--workloads", "stream",
                             "--duration", "1", "--warmup", "0", "--repeats", "1",
                             "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    recorded = {d["case"]["tunnel"]["kind"]: d["case"]["tunnel"] for d in
                (json.loads(p.read_text()) for p in (out / "cases").glob("*.json"))}
    assert recorded["wireguard"] | {"params": None} == {
        "kind": "wireguard", "label": "wireguard", "params": None, "impl": impl,
        "encrypts": True, "display": f"wireguard ({impl})", "carries": ["tcp", "udp"],
        "kernel_datapath": impl == "kernel", "aggregation": None}   # wireguard aggregates none
    assert (recorded["ssh-tun"]["impl"], recorded["ssh-tun"]["encrypts"],
            recorded["ssh-tun"]["display"]) == (None, True, "ssh-tun")
    assert (recorded["native"]["encrypts"], recorded["native"]["display"]) == (False, "native")
    assert f"wireguard ({impl})" in r.stdout                      # console summary
    html = (out / "report" / "index.html").read_text()
    assert f"wireguard ({impl})" in html
    rows = list(csv.DictReader((out / "report" / "results.csv").open()))
    by = {row["kind"]: row for row in rows}
    assert (by["wireguard"]["tunnel"], by["wireguard"]["impl"],
            by["wireguard"]["encrypts"]) == (f"wireguard ({impl})", impl, "True")
    assert by["ssh-tun"]["encrypts"] == "True" and by["native"]["encrypts"] == "False"
