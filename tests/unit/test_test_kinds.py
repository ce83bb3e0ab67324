"""Every live test says whether it is a correctness or a physics test, and no correctness test
asserts a rate, latency or ratio against a fixed bound (tests/physics.py).

This reads the live tiers' source (no test runs): every test function is marked, by its own
decorator or its module's `pytestmark`; in a function that is not a physics test, an assert
that compares a figure (throughput, Mbit/s, packets/s, µs/ms, RTT, latency, rate, knee, gain,
percent, ratio, seconds) with a constant is refused, and so is one that compares a measured
quantity with a multiple of another (`received > 0.99 * offered`, `got <= sent * 1.01`). Orderings of two measured figures
(p50 <= p99), counts of bytes and packets, and equality are correctness and pass.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import physics

TESTS = Path(__file__).resolve().parents[1]
LIVE = ("netns", "remote", "vmlab", "vmlab_bridge", "vmlab_sites")
KINDS = ("correctness", "physics")
FIGURE = re.compile(r"(mbps|mbit|gbit|throughput|pps|_us\b|_ms\b|\bms\b|rtt|latency|delay|"
                    r"rate|knee|gain|pct|percent|ratio|seconds|took|elapsed|wait|monotonic)",
                    re.IGNORECASE)
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _marks(decorators: list[ast.expr]) -> set[str]:
    out = set()
    for d in decorators:
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "mark" and node.attr in KINDS:
            out.add(node.attr)
    return out


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            value = node.value
            items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return _marks(items)
    return set()


def _constant_side(node: ast.expr) -> bool:
    """A number written in the test: a literal, a module CONSTANT, or arithmetic of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.UnaryOp):
        return _constant_side(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant_side(node.left) and _constant_side(node.right)
    return False


def _names_figure(node: ast.expr) -> bool:
    text = ast.unparse(node)
    if "len(" in text or "st_size" in text:   # counts of things, sizes of files
        return False
    return bool(FIGURE.search(text))


def _zero(node: ast.expr) -> bool:
    """0: a figure that is positive (or not negative) was measured at all, not bounded."""
    return isinstance(node, ast.Constant) and node.value == 0


def _approx(node: ast.expr) -> bool:
    """pytest.approx with a tolerance of 1 % or more: a bound; a smaller one is rounding."""
    if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("approx")):
        return False
    expected = _number(node.args[0]) if node.args else None
    for k in node.keywords:
        if k.arg in ("rel", "abs"):
            tol = _number(k.value)
            if tol is None:
                return True
            if k.arg == "abs" and expected:   # abs=1 on 75,500 packets: rounding
                tol /= abs(expected)
            if tol >= 0.01:
                return True
    return False


def _number(node: ast.expr) -> float | None:
    """The value of a number written out (literal arithmetic), else None."""
    if not (_constant_side(node) and not any(isinstance(n, ast.Name) for n in ast.walk(node))):
        return None
    return float(eval(compile(ast.Expression(node), "<approx>", "eval"), {"__builtins__": {}}))


def _scaled(node: ast.expr) -> bool:
    """A measured quantity times (or over) a number written in the test, `0.95 * sent` or
    `rate * 1.01`: a comparison with it bounds a ratio of two measured figures (a loss, a
    share, one end's rate against the other's), whatever the names say. A whole factor is
    accounting (2 packets per round trip, 64 B each) and passes."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div)):
        return False
    for num, other in ((node.left, node.right), (node.right, node.left)):
        value = _number(num)
        whole = value is not None and value.is_integer() and isinstance(node.op, ast.Mult)
        if value is not None and not whole and not _constant_side(other):
            return True
    return False


def _bounds(fn: ast.FunctionDef) -> list[tuple[int, str]]:
    """Asserts in `fn` that bound a figure by a constant, or a measured quantity by a
    multiple of another."""
    found = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assert):
            continue
        for cmp in ast.walk(node.test):
            if not isinstance(cmp, ast.Compare):
                continue
            sides = [cmp.left, *cmp.comparators]
            for (a, b), op in zip(zip(sides, sides[1:]), cmp.ops):
                if isinstance(op, ast.Eq | ast.NotEq) and any(
                        _approx(x) for x in (a, b)) and _names_figure(cmp):
                    found.append((cmp.lineno, ast.unparse(cmp)))
                if not isinstance(op, ORDER):
                    continue
                if (_constant_side(b) and not _zero(b) and _names_figure(a)) or \
                        (_constant_side(a) and not _zero(a) and _names_figure(b)) or \
                        _scaled(a) or _scaled(b):
                    found.append((cmp.lineno, ast.unparse(cmp)))
    return list(dict.fromkeys(found))


@dataclass
class Finding:
    where: str
    what: str


def scan(path: Path, root: Path = TESTS.parent) -> list[Finding]:
    tree = ast.parse(path.read_text(), str(path))
    module = _module_marks(tree)
    rel = path.relative_to(root)
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        marks = _marks(fn.decorator_list) or module
        is_test = fn.name.startswith("test_")
        if is_test and len(marks) != 1:
            out.append(Finding(f"{rel}:{fn.lineno} {fn.name}",
                               "marked neither correctness nor physics" if not marks
                               else "marked both correctness and physics"))
        if "physics" in marks and (is_test or "physics" in _marks(fn.decorator_list)):
            continue
        for line, text in _bounds(fn):
            out.append(Finding(f"{rel}:{line} {fn.name}", f"bounds a figure: {text}"))
    return out


def live_files() -> list[Path]:
    return sorted(p for tier in LIVE for p in (TESTS / tier).glob("*.py"))


def test_the_scan_finds_what_it_refuses(tmp_path: Path) -> None:
    src = tmp_path / "test_x.py"
    src.write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.correctness\n"
        "def test_a(m):\n"
        "    assert m['throughput']['value'] > 5\n"
        "    assert 0.5 * 200 < mbps < 200 * 1.02\n"
        "    assert p50 <= p99 and got > 1_000_000\n"
        "    assert got <= sent * 1.01 and 0.95 * offered < received and sent >= 2 * acks\n"
        "@pytest.mark.physics('f')\n"
        "def test_b(m):\n"
        "    assert rtt_ms < 40\n"
        "def test_c():\n"
        "    assert elapsed == pytest.approx(2.0, rel=0.1)\n")
    found = [f.what for f in scan(src, tmp_path)]
    assert found == ["bounds a figure: m['throughput']['value'] > 5",
                     "bounds a figure: 0.5 * 200 < mbps < 200 * 1.02",
                     "bounds a figure: got <= sent * 1.01",
                     "bounds a figure: 0.95 * offered < received",
                     "bounds a figure: elapsed == pytest.approx(2.0, rel=0.1)"], found
    src.write_text("import pytest\ndef test_d():\n    pass\n")
    assert [f.what for f in scan(src, tmp_path)] == ["marked neither correctness nor physics"]


def test_every_live_test_is_marked_and_no_correctness_test_bounds_a_figure() -> None:
    findings = [f for p in live_files() for f in scan(p)]
    assert not findings, "\n" + "\n".join(f"{f.where}: {f.what}" for f in findings)


def physics_figures() -> set[str]:
    """Every figure a live test names in @pytest.mark.physics(...)."""
    out = set()
    for path in live_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("mark.physics"):
                out |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return out


def test_every_physics_figure_has_its_recorded_spread() -> None:
    figures = physics_figures()
    assert figures
    problems = [why for f in sorted(figures) if (why := physics.problem(f))]
    assert not problems, "\n".join(problems)
    unused = {p.stem for p in physics.DATA.glob("*.json")} - figures
    assert not unused, f"recorded figures no test checks: {sorted(unused)}"
