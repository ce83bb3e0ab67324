"""User-supplied parameter values checked against a frozen dataclass's typed fields.

Used by tunnel drivers and workloads alike: unknown names and wrong types become problems
(strings naming the field), collected all at once rather than failing on the first.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any


def coerce_fields(cls: type, raw: dict[str, Any], where: str) -> tuple[list[str], dict[str, Any]]:
    """Check user values against a dataclass's fields: unknown names and wrong types."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, val in raw.items():
        if key not in known:
            problems.append(f"{where}: unknown parameter {key!r} (known: "
                            f"{', '.join(sorted(known)) or 'none'})")
            continue
        want = hints[key]
        ok, conv = _coerce(val, want)
        if not ok:
            problems.append(f"{where}: parameter {key!r} must be {_type_name(want)}, got {val!r}")
        else:
            values[key] = conv
    return problems, values


def _coerce(val: Any, want: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(want)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(want):
            if arg is type(None) and val is None:
                return True, None
            ok, conv = _coerce(val, arg)
            if ok:
                return True, conv
        return False, None
    if origin is typing.Literal:   # same type too: False is not the literal 0
        return any(val == a and type(val) is type(a) for a in typing.get_args(want)), val
    if origin in (tuple, list):
        if not isinstance(val, (list, tuple)):
            return False, None
        (inner, *_) = typing.get_args(want) or (Any,)
        out = []
        for v in val:
            ok, conv = _coerce(v, inner)
            if not ok:
                return False, None
            out.append(conv)
        return True, tuple(out) if origin is tuple else out
    if want is bool:
        if isinstance(val, bool):
            return True, val
        if isinstance(val, str) and val.lower() in ("true", "false", "yes", "no", "on", "off"):
            return True, val.lower() in ("true", "yes", "on")
        return False, None
    if want is int:   # 5, "5", "0x10" or 5.0; never 1.5 (silently 1), inf, nan or a bool
        if isinstance(val, bool) or (isinstance(val, float) and not val.is_integer()):
            return False, None
        try:
            return True, int(str(val), 0) if isinstance(val, str) else int(val)
        except (TypeError, ValueError, OverflowError):
            return False, None
    if want is float:   # finite only: nan and inf pass every range check written as a < x
        try:
            num = float(val)
        except (TypeError, ValueError, OverflowError):
            return False, None
        return (not isinstance(val, bool) and math.isfinite(num)), num
    if want is str:
        return (isinstance(val, (str, int)) and not isinstance(val, bool)), str(val)
    if want is Any:
        return True, val
    return isinstance(val, want), val


def _type_name(want: Any) -> str:
    origin = typing.get_origin(want)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(want))
    if origin is not None:
        return " or ".join(_type_name(a) for a in typing.get_args(want))
    return getattr(want, "__name__", str(want))


def out_of_range(**checks: tuple[int, int, int]) -> list[str]:
    """Problems for integer parameters outside their ranges: name=(value, low, high)."""
    return [f"{name} {val} out of range ({lo}..{hi})"
            for name, (val, lo, hi) in checks.items() if not lo <= val <= hi]
