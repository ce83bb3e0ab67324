"""The load generator's own Rust tests (unit tests of its parsers, mixes, tracker, capture
parser and filter, plus loopback runs of the real binary) as part of `make test`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# make test runs it alone (serial): the load generator's own tests pace packets in time
pytestmark = pytest.mark.serial

LOADGEN = Path(__file__).resolve().parents[2] / "loadgen"


def _cargo() -> str | None:
    found = shutil.which("cargo")
    home = Path.home() / ".cargo" / "bin" / "cargo"
    return found or (str(home) if home.is_file() and os.access(home, os.X_OK) else None)


@pytest.mark.skipif(_cargo() is None, reason="cargo is not installed (Rust >= 1.85 builds "
                    "the load generator: make loadgen)")
def test_cargo_test_passes() -> None:
    r = subprocess.run([str(_cargo()), "test", "--release", "--locked", "--quiet"],
                       cwd=LOADGEN, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    results = re.findall(r"test result: ok\. (\d+) passed; (\d+) failed", r.stdout)
    passed = sum(int(p) for p, _ in results)
    print(f"cargo test: {passed} Rust tests passed in {len(results)} binaries")
    assert passed >= 20 and all(f == "0" for _, f in results), r.stdout[-2000:]
