#!/usr/bin/env python3
"""Record the spread of physics-test figures on this machine (tests/physics.py).

    scripts/record_physics.py -n 20 [--fresh] TEST_ID [TEST_ID ...]

Runs pytest on the given tests N times, one after the other, with TUNBENCH_PHYSICS_RECORD=1:
each physics.check() then appends its figure (measured / model, or the excess over an additive
model) to tests/data/physics/<figure>.json instead of judging it. --fresh first empties the
figures that the selected tests declare in @pytest.mark.physics(...). Each file keeps the
command that recorded it, the machine and the time of each sample; the tolerance a later test
run applies is computed from these samples (mean +- 3.29 sd, never narrower than the extremes).

A physics test can judge only when its figure has at least 20 samples from at least 3 sittings
(invocations of this script at different times: a figure's sittings lie further apart than its
samples within one); a parametrized test (two sizes) gives a sample per parameter and run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "physics"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="runs of the tests (default 20)")
    ap.add_argument("--fresh", action="store_true",
                    help="empty the selected tests' figures before the first run")
    ap.add_argument("--import", dest="imports", nargs="+", metavar="LOG", default=[],
                    help="add the figures judged in make test-repeat runs (their "
                         "TUNBENCH_PHYSICS_LOG files), one sitting per file, and stop")
    ap.add_argument("tests", nargs="*", help="pytest node ids")
    args = ap.parse_args(argv[1:])
    if args.imports:
        return import_logs([Path(p) for p in args.imports])
    if not args.tests:
        ap.error("name the tests to record (or --import LOG...)")
    command = "scripts/record_physics.py " + " ".join(shlex.quote(a) for a in argv[1:])
    env = {**os.environ, "TUNBENCH_PHYSICS_RECORD": "1", "TUNBENCH_PHYSICS_COMMAND": command,
           "TUNBENCH_PHYSICS_MACHINE": f"{platform.node()} {platform.release()} "
                                       f"{os.cpu_count()} cores",
           # one sitting per invocation: the tolerance counts how far sittings lie apart
           "TUNBENCH_PHYSICS_SITTING": time.strftime("%Y-%m-%dT%H:%M:%S")}
    failed = 0
    for i in range(args.n):
        run_env = {**env, "TUNBENCH_PHYSICS_FRESH": "1" if args.fresh and i == 0 else "0"}
        t0 = time.monotonic()
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-o", "addopts=", "-s", *args.tests], cwd=ROOT, env=run_env)
        print(f"record_physics: run {i + 1}/{args.n} exit {code} in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        failed += code != 0
    for p in sorted(DATA.glob("*.json")):
        doc = json.loads(p.read_text())
        vals = [s["value"] for s in doc["samples"]]
        if doc.get("recorded_with") == command:
            print(f"{p.stem}: {len(vals)} samples, min {min(vals):.4f}, max {max(vals):.4f}")
    print(f"record_physics: {failed} of {args.n} runs failed")
    return 1 if failed else 0


def import_logs(logs: list[Path]) -> int:
    """Each log (one JSON line per figure judged in a make test-repeat run) becomes a sitting
    of the figures it holds."""
    machine = f"{platform.node()} {platform.release()} {os.cpu_count()} cores"
    for log in logs:
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        sitting = f"{log.name} {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(log.stat().st_mtime))}"
        for figure in sorted({x["figure"] for x in lines}):
            path = DATA / f"{figure}.json"
            doc = json.loads(path.read_text())
            doc["samples"] += [{"value": x["value"], "at": x["at"], "machine": machine,
                                "sitting": sitting, "source": f"make test-repeat: {x['test']}"}
                               for x in lines if x["figure"] == figure]
            doc["recorded_with"].append(f"scripts/record_physics.py --import {log.name}")
            path.write_text(json.dumps(doc, indent=1) + "\n")
            print(f"{figure}: +{sum(x['figure'] == figure for x in lines)} samples from {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
