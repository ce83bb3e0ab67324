"""Layering of src/tunbench, read from the source (ast): no import cycle between modules, the
ledger's undo kinds registered by their owners, one bpf(2) syscall table.

The import graph has an edge A -> B for each `import`/`from ... import` of a tunbench module in
A: `from P import x` is an edge to P.x when P.x is a module, else to P. Imports under
`if TYPE_CHECKING:` are left out (they never run). A package's own __init__ running before its
modules is not an edge (that order is Python's, not a cycle).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from zipfile import ZipFile

import pytest

from tunbench import proc

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class Edge:
    target: str
    line: int
    top_level: bool


def _modules() -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)"""
    out = {}
    for path in sorted((SRC / "tunbench").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run when the module is imported: its body, and inside module-level
    if/try blocks (never `if TYPE_CHECKING:`)."""
    for node in body:
        if _type_checking(node):
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.If):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])
        else:
            yield node


def _walk(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement that can run, with whether it runs at import time."""
    top = {id(n) for n in _module_level(tree.body)}
    hidden = {id(n) for t in ast.walk(tree) if isinstance(t, ast.stmt) and _type_checking(t)
              for s in t.body for n in ast.walk(s)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in hidden:
            yield node, id(node) in top


def _targets(name: str, is_pkg: bool, node: ast.Import | ast.ImportFrom,
             mods: dict[str, tuple[Path, bool]]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if node.level:
        base = name.split(".")[: len(name.split(".")) - (0 if is_pkg else 1)]
        base = base[: len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    out = []
    for a in node.names:
        sub = f"{mod}.{a.name}"
        out.append(sub if sub in mods else mod)
    return [t for t in out if t in mods and t != name]


def import_graph() -> dict[str, list[tuple[str, Edge]]]:
    """module -> [(target, edge)] over src/tunbench."""
    mods = _modules()
    graph: dict[str, list[tuple[str, Edge]]] = {m: [] for m in mods}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, top in _walk(tree):
            for t in _targets(name, is_pkg, node, mods):
                graph[name].append((t, Edge(t, node.lineno, top)))
    return graph


def cycles(graph: dict[str, list[tuple[str, Edge]]], top_level_only: bool) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    succ = {m: sorted({t for t, e in es if e.top_level or not top_level_only})
            for m, es in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10 * len(succ)))
    try:
        for v in sorted(succ):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)
    return sorted(out)


def describe(comp: list[str], graph: dict[str, list[tuple[str, Edge]]],
             top_level_only: bool) -> str:
    """A component as its edges: 'a:12 -> b' (line of the import in a), one per edge."""
    members = set(comp)
    lines = [f"{m}:{e.line} -> {t}{'' if e.top_level else ' (in a function)'}"
             for m in comp for t, e in graph[m]
             if t in members and (e.top_level or not top_level_only)]
    return f"cycle of {len(comp)} modules: " + "; ".join(sorted(set(lines)))


def test_no_import_cycle_at_module_level() -> None:
    graph = import_graph()
    found = cycles(graph, top_level_only=True)
    assert not found, "\n".join(describe(c, graph, True) for c in found)


def test_no_import_cycle_even_through_imports_inside_functions() -> None:
    """An import inside a function (kept to defer a heavy module) never hides a cycle: each
    module imports only the ones below it, inside a package too."""
    graph = import_graph()
    found = cycles(graph, top_level_only=False)
    assert not found, "\n".join(describe(c, graph, False) for c in found)


def test_the_graph_sees_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself, on a package written here: a two-module cycle through a function
    import is found and named, a TYPE_CHECKING import is not an edge."""
    pkg = tmp_path / "tunbench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from . import a\n")
    (pkg / "sub" / "d.py").write_text("from ..c import x\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    graph = import_graph()
    assert cycles(graph, top_level_only=True) == []
    assert cycles(graph, top_level_only=False) == [["tunbench.a", "tunbench.sub.b"]]
    assert describe(["tunbench.a", "tunbench.sub.b"], graph, False) == (
        "cycle of 2 modules: tunbench.a:1 -> tunbench.sub.b; "
        "tunbench.sub.b:2 -> tunbench.a (in a function)")
    assert [t for t, _ in graph["tunbench.c"]] == []
    assert [t for t, _ in graph["tunbench.sub.d"]] == ["tunbench.c"]


# -- the ledger's kinds: each registered by its owner, all loaded before a journal replay ------

def _registered_kinds() -> dict[str, str]:
    """kind -> module, for every @register_undo("kind") in src/tunbench."""
    out = {}
    for name, (path, _) in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("register_undo")
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                out[node.args[0].value] = name
    return out


def test_journal_replay_loads_the_owner_of_every_ledger_kind() -> None:
    from tunbench.testbed import journals, ledger
    kinds = _registered_kinds()
    assert {"netns", "link", "process", "path", "command", "bpfdrop", "bpffs", "bpfpins",
            "tbtun-tc", "remote", "remote_agent"} <= set(kinds)
    assert kinds["bpfdrop"] == "tunbench.testbed.bpfdrop"
    assert kinds["bpfpins"] == "tunbench.tbtun.loader"
    missing = sorted(set(kinds) - set(ledger.undo_kinds()))
    assert not missing, (f"kinds registered by modules testbed/journals.py does not import: "
                         f"{', '.join(f'{k} ({kinds[k]})' for k in missing)}")
    assert journals.OWNERS


def test_an_entry_of_an_unloaded_kind_is_named() -> None:
    from tunbench.testbed.ledger import Ledger
    lg = Ledger("tbunitkind", journal=False, entries=[{"kind": "tb-no-such-kind", "name": "x"}])
    errors = lg.undo_all()
    assert errors == ["could not undo tb-no-such-kind x: no undo handler for ledger kind "
                      "'tb-no-such-kind' (the module that makes it is not loaded)"]


def test_a_kind_cannot_get_a_second_owner() -> None:
    from tunbench.testbed import ledger
    with pytest.raises(ValueError, match="ledger kind 'netns' has an undo handler already "
                                         r"\(tunbench.testbed.ledger._undo_netns\)"):
        ledger.register_undo("netns")(lambda e: None)


# -- one bpf(2) syscall table, checked against the kernel headers this host has -------------

def _header_number(path: Path) -> int | None:
    if not path.is_file():
        return None
    m = re.search(r"#define __NR_bpf\s+(\d+)\b", path.read_text())
    return int(m.group(1)) if m else None


def test_bpf_syscall_numbers_match_the_kernel_headers() -> None:
    from tunbench.remote.agent import bpfsys
    headers = {  # machine -> the uapi header that has its number, where Debian installs it
        "x86_64": [Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")],
        "i686": [Path("/usr/include/x86_64-linux-gnu/asm/unistd_32.h"),
                 Path("/usr/include/i386-linux-gnu/asm/unistd_32.h")],
        "aarch64": [Path("/usr/include/asm-generic/unistd.h")],   # the generic table
        "riscv64": [Path("/usr/include/asm-generic/unistd.h")],
    }
    checked = 0
    for machine, paths in headers.items():
        for p in paths:
            nr = _header_number(p)
            if nr is not None:
                assert bpfsys.SYS_BPF[machine] == nr, (machine, str(p))
                checked += 1
                break
    if checked == 0:
        pytest.skip("no kernel uapi headers here (apt-get install linux-libc-dev)")
    assert bpfsys.number("x86_64", 8) == 321 and bpfsys.number("aarch64", 8) == 280
    assert bpfsys.number("x86_64", 4) == 357 and bpfsys.number("aarch64", 4) == 386
    with pytest.raises(OSError, match="bpf\\(2\\) syscall number unknown on sparc64"):
        bpfsys.number("sparc64", 8)


def test_one_bpf_syscall_table() -> None:
    """Only bpfsys.py spells bpf(2)'s number; bpfdrop and bpfhost call through it."""
    holders = [name for name, (path, _) in _modules().items()
               if re.search(r"\b(SYS_BPF|__NR_bpf)\b\s*=|libc\.syscall\(", path.read_text())]
    assert holders == ["tunbench.remote.agent.bpfsys"]


def test_the_agent_zipapp_imports_alone(tmp_path: Path) -> None:
    """The agent ships as a zip of its own files (no tunbench on the host): every module it
    needs, bpfsys included, is in it; imported by an isolated python3 that sees only the zip."""
    from tunbench.remote.agent import client
    zpath = tmp_path / "agent.pyz"
    zpath.write_bytes(client.build_zipapp(netlink=False))
    assert "tbagent/bpfsys.py" in ZipFile(BytesIO(zpath.read_bytes())).namelist()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import tbagent.core, tbagent.bpfhost, tbagent.bpfsys; "
            "print(tbagent.bpfhost.bpfsys is tbagent.bpfsys, tbagent.bpfsys.number())")
    r = proc.run([sys.executable, "-I", "-S", "-c", code, str(zpath)], cwd=str(tmp_path),
                 timeout=30)
    from tunbench.remote.agent import bpfsys
    assert r.stdout.split() == ["True", str(bpfsys.number())]
