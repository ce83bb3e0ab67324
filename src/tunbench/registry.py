"""Plugin discovery shared by tunnel kinds and workloads: every module of a package that
defines the named attribute is registered under that object's key (pyroute2's link-kind and
Ansible's plugin style: a plain dict, no entry points). Two modules registering the same key
(a copied module that kept the original's `kind`) is an error, never a silent replacement."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Any

from .errors import SpecError


def discover(package: str, path: Iterable[str], attr: str, key: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for mod in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if mod.name.startswith("_") or mod.name == "base":
            continue
        obj = getattr(importlib.import_module(f"{package}.{mod.name}"), attr, None)
        if obj is None:
            continue
        name = getattr(obj, key)
        if name in found and found[name] is not obj:
            raise SpecError(f"{package}.{mod.name} registers {key} '{name}', which "
                            f"{found[name].__module__} already registers",
                            f"give {package}.{mod.name} its own {key}")
        found[name] = obj
    return found
