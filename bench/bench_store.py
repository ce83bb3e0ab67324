"""The results store and trend at scale: rows/s of `tunbench db import` on a folder of 100
campaigns (copies of the recorded real campaigns in tests/data/campaigns, moved in time), the
same import again (all unchanged: the idempotence check's cost), and the wall time of
`tunbench trend` over those 100 campaigns, from the store and from the folders. Figures are
printed, nothing is asserted."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tunbench.store.copies import retimed

DATA = Path(__file__).parent.parent / "tests" / "data" / "campaigns"
N = 100
TB = [sys.executable, "-m", "tunbench"]


def make(root: Path) -> None:
    sources = sorted(p.parent for p in DATA.glob("*/index.json"))
    t0 = time.time() - N * 3 * 3600
    for i in range(N):
        retimed(sources[i % len(sources)], root / f"c{i:03d}", t0 + i * 3 * 3600)


def timed(argv: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tb-bench-store-") as tmp:
        root, store = Path(tmp) / "campaigns", Path(tmp) / "results.db"
        make(root)
        files = sum(1 for _ in root.glob("*/cases/*.json"))
        mb = sum(p.stat().st_size for p in root.rglob("*.json")) / 1e6
        base, _ = timed([*TB, "--version"])
        sec, _ = timed([*TB, "db", "import", "--quiet", "--db", str(store), str(root)])
        conn = sqlite3.connect(store)
        rows = sum(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                   for t in ("campaign", "environment", "case", "metric"))
        metrics = conn.execute("SELECT count(*) FROM metric").fetchone()[0]
        conn.close()
        again, _ = timed([*TB, "db", "import", "--quiet", "--db", str(store), str(root)])
        print(f"{N} campaigns, {files} case files, {mb:.1f} MB of JSON")
        print(f"db import: {sec:.2f} s wall ({sec - base:.2f} s after {base:.2f} s of "
              f"interpreter start), {rows} rows ({metrics} metric rows): "
              f"{rows / (sec - base):,.0f} rows/s")
        print(f"db import again (all unchanged): {again:.2f} s, {again / sec:.2f}x the first")
        for label, args in (("trend from the store", ["--db", str(store)]),
                            ("trend from the 100 folders", [str(root)])):
            s, out = timed([*TB, "trend", "--json", *args])
            doc = json.loads(out)
            print(f"{label}: {s:.2f} s wall ({doc['campaigns']} campaigns, {doc['cases']} "
                  f"case values, {len(doc['changes'])} change points)")
        s, _ = timed([*TB, "trend", "--db", str(store), "--out", str(Path(tmp) / "fig")])
        figs = len(list((Path(tmp) / "fig").glob("*.png")))
        print(f"trend from the store with figures: {s:.2f} s wall ({figs} PNG + SVG)")


if __name__ == "__main__":
    main()
