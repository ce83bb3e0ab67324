"""Run every benchmark under bench/ (each prints its own side-by-side figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

here = Path(__file__).parent
failed = 0
for script in sorted(here.glob("bench_*.py")):
    print(f"== {script.name}", flush=True)
    failed += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
sys.exit(1 if failed else 0)
