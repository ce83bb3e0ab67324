"""Unit tier: the input fuzz test reports how many inputs it generated."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    mod = sys.modules.get("test_input_fuzz")
    counts = getattr(mod, "COUNTS", None)
    if counts:
        terminalreporter.write_line(
            f"input fuzz: {sum(counts.values())} generated inputs ("
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
