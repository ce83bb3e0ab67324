"""Plugin discovery shared by tunnel kinds and workloads: every module of a package that
defines the named attribute is registered under that object's key (pyroute2's link-kind and
Ansible's plugin style: a plain dict, no entry points)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any


def discover(package: str, path: Iterable[str], attr: str, key: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for mod in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if mod.name.startswith("_") or mod.name == "base":
            continue
        obj = getattr(importlib.import_module(f"{package}.{mod.name}"), attr, None)
        if obj is not None:
            found[getattr(obj, key)] = obj
    return found
