"""Test modules are imported by basename (rootdir, no packages): two test files of one name in
different tiers break collection of the whole suite ('import file mismatch'), which only shows
when both tiers are collected together, as make test's live phase does."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_every_test_module_name_is_unique() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for f in TESTS.rglob("*.py"):
        if "__pycache__" not in f.parts:
            where[f.name].append(str(f.relative_to(TESTS)))
    twice = {n: sorted(ps) for n, ps in where.items()
             if len(ps) > 1 and n not in ("conftest.py", "__init__.py")}
    assert not twice, f"rename one of each: {twice}"
