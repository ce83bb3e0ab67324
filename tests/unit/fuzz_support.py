"""Helpers of the input fuzz test (tests/unit/test_input_fuzz.py): the input schema as the code
knows it, a small TOML writer, the CLI run in-process, and a snapshot of everything tunbench
could create on this host.

The schema is read from the code, never typed here: experiment keys from spec.EXPERIMENT_KEYS
with their types from the Experiment and Netem dataclasses, tunnel kinds and workloads from
their registries with their Params dataclasses, offload features from spec.OFFLOAD_FEATURES,
run flags from the argparse parser. A new kind, workload, parameter or flag joins the fuzz
test the day it lands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import re
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunbench import cli, listing, spec, tunnels, workloads
from tunbench.testbed import ledger
from tunbench.testbed.netem import Netem

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


# ---- the schema, from the code ----------------------------------------------------------

def experiment_fields() -> dict[str, Any]:
    """Every [experiment] key -> its type (netem keys from Netem; netem_rate is Netem.rate)."""
    hints = typing.get_type_hints(spec.Experiment)
    netem = typing.get_type_hints(Netem)
    out: dict[str, Any] = {}
    for key in sorted(spec.EXPERIMENT_KEYS):
        if key in hints:
            out[key] = hints[key]
        elif key in spec.NETEM_KEYS:
            out[key] = netem["rate" if key == "netem_rate" else key]
        else:
            out[key] = Any
    return out


def params_fields(params_cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(params_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(params_cls)}


def spec_fields(spec_cls: type) -> list[tuple[str, Any]]:
    """A TunnelSpec/WorkloadSpec's table keys besides the kind/name and the parameters."""
    hints = typing.get_type_hints(spec_cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(spec_cls)
            if f.name not in ("kind", "name", "params")]


def tunnel_schema() -> dict[str, dict[str, Any]]:
    return {k: params_fields(d.Params) for k, d in sorted(tunnels.registry().items())}


def workload_schema() -> dict[str, dict[str, Any]]:
    return {n: params_fields(w.Params) for n, w in sorted(workloads.registry().items())}


def defaults(params_cls: type) -> dict[str, Any]:
    """The dataclass's defaults as TOML values (None left out: TOML has no null)."""
    out = {}
    for k, v in dataclasses.asdict(params_cls()).items():
        if v is None:
            continue
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


def base_type(want: Any) -> Any:
    """int | None -> int; Literal and containers are kept as they are."""
    origin = typing.get_origin(want)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(want) if a is not type(None)]
        return base_type(args[0]) if len(args) == 1 else want
    return want


def numeric(want: Any) -> bool:
    return base_type(want) in (int, float)


def wrong_type_values(want: Any) -> list[Any]:
    """TOML values that no reading of `want` accepts."""
    want = base_type(want)
    table = {"a": 1}
    if want is bool:
        return [2, 1.5, [True], table, "maybe"]
    if want is int:
        return [1.5, "ten", [1], table, True, math.nan, math.inf]
    if want is float:
        return ["fast", [1.0], table, True, math.nan, math.inf, -math.inf]
    if want is str:
        return [[1], table, True, 1.5]
    origin = typing.get_origin(want)
    if origin is typing.Literal:
        choices = typing.get_args(want)
        if all(isinstance(c, str) for c in choices):
            return ["no-such-choice", 7, [choices[0]], table]
        return [max(choices) + 1, -1, str(choices[0]) + "x", [choices[0]], table, True]
    if origin in (tuple, list):
        return [table, [table], 1.5]
    return [table]


def out_of_range_values(want: Any) -> list[Any]:
    """Numbers no parameter or experiment field of tunbench can sensibly take."""
    if base_type(want) is int:
        return [-1, -(2**63), 2**63 - 1]
    return [-1.0, 1e308, -math.inf, math.inf, math.nan]


# ---- TOML --------------------------------------------------------------------------------

def toml_value(v: Any) -> str:
    """A value as TOML, by the writer `tunbench list --params` uses."""
    text = listing.toml_value(v)
    if text is None:
        raise TypeError(v)
    return text


def toml_key(k: str) -> str:
    return k if BARE_KEY.match(k) else listing.toml_string(k)


def dumps(doc: dict[str, Any]) -> str:
    """A spec dict as TOML: tables, arrays of tables, and anything else as a top-level key."""
    lines: list[str] = []
    for key, val in doc.items():
        if isinstance(val, dict):
            lines.append(f"[{toml_key(key)}]")
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in val.items()]
        elif isinstance(val, list) and val and all(isinstance(t, dict) for t in val):
            for t in val:
                lines.append(f"[[{toml_key(key)}]]")
                lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in t.items()]
        else:
            lines.insert(0, f"{toml_key(key)} = {toml_value(val)}")
    return "\n".join(lines) + "\n"


# ---- running the CLI ---------------------------------------------------------------------

@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_inprocess(argv: list[str]) -> Result:
    """tunbench.cli.main in this process, as a user's shell would run it (SystemExit from
    argparse becomes its exit code)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return Result(int(code), out.getvalue(), err.getvalue())


# ---- what tunbench could create ---------------------------------------------------------

def _listdir(path: Path) -> set[str]:
    try:
        return set(os.listdir(path))
    except FileNotFoundError:
        return set()


def _children(pid: int) -> set[int]:
    """Child processes of `pid`, from each thread's children list."""
    out: set[int] = set()
    for tid in _listdir(Path(f"/proc/{pid}/task")):
        try:
            out |= {int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()}
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class Snapshot:
    netns: frozenset[str]
    links: frozenset[str]
    journals: frozenset[str]
    owners: frozenset[str]
    children: frozenset[int]


def snapshot() -> Snapshot:
    return Snapshot(
        frozenset(n for n in _listdir(Path("/run/netns")) if n.startswith("tb-")),
        frozenset(n for n in _listdir(Path("/sys/class/net")) if n.startswith("tb")),
        frozenset(_listdir(ledger.STATE_DIR)),
        frozenset(_listdir(ledger.OWNERS_DIR)),
        frozenset(_children(os.getpid())))


def _run_id(name: str) -> str:
    return name.split("-")[1] if name.startswith("tb-") else name[2:7]


def _owner(run_id: str) -> int | None:
    try:
        return int((ledger.OWNERS_DIR / run_id).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def created_since(before: Snapshot, pids: set[int]) -> list[str]:
    """What appeared since `before` that this test's processes (`pids`) made. Engineers and
    CI share this host, so a tb- object whose owner file names a live process other than
    ours is a neighbour's and not counted. A neighbour writes its owner file a moment after
    its first object exists, so an object without one is looked at again before it counts."""
    found = _new_objects(before, pids)
    if found:
        time.sleep(0.3)
        found = [f for f in _new_objects(before, pids) if f in found]
    after = snapshot()
    return found + [f"child process {p}" for p in sorted(after.children - before.children)]


def _new_objects(before: Snapshot, pids: set[int]) -> list[str]:
    after = snapshot()
    found: list[str] = []
    for what, new in (("namespace", after.netns - before.netns),
                      ("link", after.links - before.links),
                      ("journal", after.journals - before.journals),
                      ("owner file", after.owners - before.owners)):
        for name in sorted(new):
            rid = Path(name).stem if what in ("journal", "owner file") else _run_id(name)
            owner = _owner(rid)
            if owner is None or owner in pids or not Path(f"/proc/{owner}").exists():
                found.append(f"{what} {name}")
    return found
