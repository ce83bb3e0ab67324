#!/usr/bin/env python3
"""The mesh's cost (issue 31): wall time of a local mesh campaign for N = 3, 4, 6, 8 sites
(stream, native and vxlan, 2 s, one round), its fixed cost per pair against a pair campaign's,
and the mesh testbed's setup + teardown per site. Run as root, under the live lock:
    python bench/bench_mesh.py [--sites 3 4 6 8] [--pair-rounds 3] [--builds 3]

In ONE sitting, for each N in turn: a pair campaign (`tunbench run --tunnels native,vxlan
--workloads stream --duration 2 --warmup 0 --repeats R`), then the mesh campaign (the same with
`--testbed mesh --sites N --repeats 1`), each through the CLI as a user runs it (--no-report:
the HTML report is not the topology's cost). From the recorded cases (started, ended):
  - a case's fixed cost: its wall time less its 2 s measurement (the testbed built and undone,
    the tunnel, the workload's own setup, the probes, the document);
  - the fixed cost per pair: the sum over a pair's two cases (native, vxlan); a pair campaign
    measures one pair per round, so its rounds give its per-pair figures;
  - the campaign's own overhead: its wall time less the sum of its cases' (start, preflight,
    planning, index).
Then, per N, one mesh case's testbed alone (testbed/mesh.py: the bridge namespace and the
pair's two site namespaces, s1 and sN) built and undone through the ledger --builds times,
beside the pair's (testbed/local.py, 2 sites): setup and teardown, and their sum per site of
the case (/ 2, the bridge included, as the pair's / 2).
Ratios are mesh / pair, medians; they print, they do not pass or fail (the issue's goal: the
fixed cost per pair within 1.2x of a pair campaign's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tunbench import spec
from tunbench.testbed import local, mesh, names
from tunbench.testbed.ledger import Ledger

MEASURE_S = 2.0
COMMON = ["--tunnels", "native,vxlan", "--workloads", "stream", "--duration", str(MEASURE_S),
          "--warmup", "0", "--no-report", "--quiet"]


def campaign(extra: list[str], out: Path) -> dict[str, Any]:
    """One `tunbench run` through the CLI: its wall time and, per pair, its cases' costs."""
    argv = [sys.executable, "-m", "tunbench", "run", *COMMON, *extra, "--out", str(out)]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=os.environ)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} exited {r.returncode}:\n{r.stderr[-2000:]}")
    index = json.loads((out / "index.json").read_text())
    per_pair: dict[str, list[float]] = {}
    cases_s, statuses = [], []
    for c in index["cases"]:
        doc = json.loads((out / c["file"]).read_text())
        statuses.append(doc["status"])
        took = doc["ended"] - doc["started"]
        cases_s.append(took)
        # a mesh case's pair; a pair campaign's round is its one pair
        key = "-".join(c["pair"]) if c.get("pair") else f"round {c['repeat']}"
        per_pair.setdefault(key, []).append(took - MEASURE_S)
    return {"wall_s": wall, "cases": len(cases_s), "cases_s": sum(cases_s),
            "failed": sum(s != "ok" for s in statuses),
            "fixed_per_case": [x for v in per_pair.values() for x in v],
            "fixed_per_pair": [sum(v) for v in per_pair.values()], "pairs": len(per_pair)}


def build_undo(n: int | None) -> tuple[float, float]:
    """Setup and teardown of a case's testbed in a mesh of n sites, its pair s1-sN (None:
    the pair testbed's two namespaces)."""
    rid = names.new_run_id()
    ledger = Ledger(rid)
    try:
        t0 = time.monotonic()
        if n is None:
            local.build(rid, ledger)
        else:
            exp = spec.build({"testbed": {"kind": "mesh", "sites": n},
                              "tunnel": [{"kind": "native"}]}, "bench_mesh")
            assert exp.mesh is not None
            mesh.build(rid, ledger, exp.mesh, ("s1", f"s{n}"))
        setup = time.monotonic() - t0
    finally:
        t0 = time.monotonic()
        errors = ledger.close()
        teardown = time.monotonic() - t0
        local.sweep(rid)
    if errors:
        print(f"teardown errors: {errors}", file=sys.stderr)
    return setup, teardown


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, nargs="+", default=[3, 4, 6, 8])
    ap.add_argument("--pair-rounds", type=int, default=3,
                    help="rounds of each pair campaign (one pair measured per round)")
    ap.add_argument("--builds", type=int, default=3,
                    help="mesh / pair testbeds built and undone per N for setup + teardown")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    pair_fixed: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tb-bench-mesh-") as tmp:
        for n in args.sites:
            p = campaign(["--repeats", str(args.pair_rounds)], Path(tmp) / f"pair-{n}")
            m = campaign(["--testbed", "mesh", "--sites", str(n), "--repeats", "1"],
                         Path(tmp) / f"mesh-{n}")
            pair_fixed += p["fixed_per_pair"]
            rows.append({"n": n, "mesh": m, "pair": p})
            print(f"N={n}: mesh {m['pairs']} pairs, {m['cases']} cases ({m['failed']} not ok) "
                  f"in {m['wall_s']:.1f} s, fixed per pair {med(m['fixed_per_pair']):.2f} s; "
                  f"pair campaign beside it: {p['cases']} cases ({p['failed']} not ok) in "
                  f"{p['wall_s']:.1f} s, fixed per pair {med(p['fixed_per_pair']):.2f} s",
                  flush=True)
    for r in rows:
        builds = [build_undo(r["n"]) for _ in range(args.builds)]
        pairs = [build_undo(None) for _ in range(args.builds)]
        r["setup"], r["teardown"] = med([b[0] for b in builds]), med([b[1] for b in builds])
        r["pair_setup"], r["pair_teardown"] = (med([b[0] for b in pairs]),
                                               med([b[1] for b in pairs]))
    pf = med(pair_fixed)
    print(f"\nlocal mesh campaigns: stream, native + vxlan, {MEASURE_S:g} s, 1 round; pair "
          f"campaign: the same, {args.pair_rounds} rounds per N (fixed cost per pair over all "
          f"{len(pair_fixed)} of its rounds: median {pf:.2f} s)")
    print(f"{'N':>2} {'pairs':>5} {'cases':>5} {'wall s':>7} {'s/pair':>6} {'campaign s':>10} "
          f"{'fixed/pair s':>12} {'vs pair':>7} {'setup ms':>8} {'teardown ms':>11} "
          f"{'per site ms':>11} {'vs pair':>7}")
    pair_site = med([(r["pair_setup"] + r["pair_teardown"]) / 2 for r in rows])
    for r in rows:
        m, n = r["mesh"], r["n"]
        fixed = med(m["fixed_per_pair"])
        site = (r["setup"] + r["teardown"]) / 2
        print(f"{n:>2} {m['pairs']:>5} {m['cases']:>5} {m['wall_s']:>7.1f} "
              f"{m['wall_s'] / m['pairs']:>6.2f} {m['wall_s'] - m['cases_s']:>10.2f} "
              f"{fixed:>12.2f} {fixed / pf:>6.2f}x {r['setup'] * 1000:>8.0f} "
              f"{r['teardown'] * 1000:>11.0f} {site * 1000:>11.0f} {site / pair_site:>6.2f}x")
    ps, pt = med([r["pair_setup"] for r in rows]), med([r["pair_teardown"] for r in rows])
    pw = med([r["pair"]["wall_s"] / r["pair"]["pairs"] for r in rows])
    pc = med([r["pair"]["wall_s"] - r["pair"]["cases_s"] for r in rows])
    print(f"{'pair':>4} {1:>3} {2:>5} {'':>7} {pw:>6.2f} {pc:>10.2f} {pf:>12.2f} "
          f"{1:>6.2f}x {ps * 1000:>8.0f} {pt * 1000:>11.0f} {pair_site * 1000:>11.0f} "
          f"{1:>6.2f}x")
    print("fixed/pair: a pair's two cases' wall time less their 2 x 2 s measurement (median "
          "over pairs); campaign s: wall less the cases (start, preflight, plan, index); "
          "s/pair: wall / pairs (pair row: per round); setup / teardown: one case's testbed "
          "(the mesh: the bridge and its pair's two sites); per site: (setup + teardown) / 2 "
          "(the mesh's bridge included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
