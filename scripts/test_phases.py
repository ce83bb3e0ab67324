#!/usr/bin/env python3
"""`make test`: the whole suite in phases, then one summary of all.

1. Side by side:
   - the pure tiers (tests/unit, tests/report: no root, no traffic, CPU-bound) on every core
     with pytest-xdist (~8 min of CPU here), at a lower priority (nice 5): they end minutes
     before the VM lab's guest run, the group's longest;
   - the VM lab tiers (tests/vmlab_bridge: the image build, then qemu under TCG;
     tests/vmlab_sites, two guests, in a process of its own, waiting for the image), the
     remote tier (tests/remote: sshd hosts in namespaces) and the netns tests marked
     `beside` (their own testbeds, no figure judged), each one test at a time, their output
     kept in a file and printed when the phase ends. All of them are correctness tests (no
     figure is judged), so sharing the cores costs them time, not answers; the netns tests
     are mostly waiting (bring-up, warm-up, a 2 s workload), which the CPU-bound tiers beside
     them fill.
2. Everything else (the rest of tests/netns and the pure-tier tests marked `serial`) in one
   process, one test at a time, alone: the physics tests among them compare figures measured
   on the host's cores, which a test beside them would skew, the serial tests watch the host,
   and the others look at every namespace of ours or judge a figure.

Each phase prints pytest's own summary (-ra: every skip with its reason). The last lines add
the phases up: passed, failed, errors, skipped, each skip reason with its count, the wall time
of each phase, the time per tier and the 10 slowest tests, and a plain closing line. The exit
code is non-zero when any phase failed.

`make test TEST_ARGS="..."` bypasses the phases: one pytest with those arguments.

SIGTERM or SIGHUP (a CI timeout, a closed terminal) is passed on to the running pytest(s),
which tear their fixtures down (tests/sigterm_teardown.py) before this script stops; the next
phase does not start. Ctrl-C (SIGINT) the same way.

scripts/test_repeat.py (`make test-repeat`) runs pytest through the same `call` and reads its
JUnit XML with `read_junit`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PURE = ["tests/unit", "tests/report"]
VM = ["tests/vmlab_bridge"]
VM_SITES = ["tests/vmlab_sites"]
# The first group's longest phase is the VM lab's guest run (qemu under TCG): the pure tiers,
# done minutes before it, yield the cores to it (nice), and the two-guest tier boots its
# guests beside it instead of after it.
PURE_NICE = 5
# pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else broke the run
OK_CODES = (0, 5)
PHASE_ENV = "TUNBENCH_TEST_PHASE"


@dataclass
class Phase:
    key: str     # TUNBENCH_TEST_PHASE for tests/conftest.py
    name: str
    argv: list[str]
    junit: Path
    code: int = 0
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)
    group: int = 0             # phases of one group run side by side
    log: Path | None = None    # its output, when it runs beside another: printed at its end


def phases(python: str, tmp: Path) -> list[Phase]:
    """tests/conftest.py keeps each phase's tests by TUNBENCH_TEST_PHASE: the pure tiers
    without their `serial` tests, the VM lab tiers, the remote tier and the netns tests marked
    `beside` side by side (group 1), then everything else (group 2)."""
    workers = str(max(1, min(os.cpu_count() or 1, 8)))
    junit = ["-o", "junit_family=xunit1"]   # node ids with their file, for the tier times
    return [Phase("pure", "pure tiers (unit, report) on " + workers + " workers",
                  ["nice", "-n", str(PURE_NICE), python, "-m", "pytest", *junit, "-n", workers,
                   *PURE], tmp / "pure.xml", group=1),
            Phase("vm", "VM lab tier (beside the pure tiers)",
                  [python, "-m", "pytest", *junit, *VM], tmp / "vm.xml", group=1,
                  log=tmp / "vm.log"),
            Phase("vm", "VM lab two-guest tier (beside the pure tiers)",
                  [python, "-m", "pytest", *junit, *VM_SITES], tmp / "vm-sites.xml", group=1,
                  log=tmp / "vm-sites.log"),
            Phase("remote", "remote tier (beside the pure tiers)",
                  [python, "-m", "pytest", *junit, "tests/remote"], tmp / "remote.xml",
                  group=1, log=tmp / "remote.log"),
            Phase("beside", "netns tests marked beside (beside the pure tiers)",
                  [python, "-m", "pytest", *junit, "tests/netns"], tmp / "beside.xml",
                  group=1, log=tmp / "beside.log"),
            Phase("live", "netns tier and serial tests, one at a time, alone",
                  [python, "-m", "pytest", *junit, "tests"], tmp / "live.xml", group=2)]


@dataclass
class Case:
    """One <testcase> of a JUnit XML file."""
    test: str       # pytest's node id (from the `file` that junit_family=xunit1 writes)
    outcome: str    # passed, failed, errors or skipped: the keys of Phase.counts
    message: str    # the failure's, error's or skip's message; "" when it passed
    seconds: float  # setup, call and teardown


def node_id(case: ET.Element) -> str:
    """tests/a/test_b.py::TestC::test_d[x] from a <testcase>; without its `file` attribute
    (junit_family=xunit2, pytest's default) the module stays dotted: tests.a.test_b::..."""
    classname, name, file = case.get("classname", ""), case.get("name", ""), case.get("file")
    if file and file.endswith(".py"):
        module = file[:-3].replace("/", ".")
        if classname == module or classname.startswith(module + "."):
            classes = classname[len(module) + 1:].replace(".", "::")
            return "::".join(filter(None, (file, classes, name)))
    return "::".join(filter(None, (classname, name)))


def read_junit(phase: Phase) -> list[Case]:
    """Counts and skip reasons of one phase from its JUnit XML (absent: the run broke, nothing
    counted); returns its testcases in their order."""
    try:
        root = ET.parse(phase.junit).getroot()
    except (OSError, ET.ParseError):
        return []
    cases = []
    for el in root.iter("testcase"):
        case = Case(node_id(el), "passed", "", float(el.get("time") or 0))
        for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            sub = el.find(tag)
            if sub is not None:
                case.outcome, case.message = name, (sub.get("message") or "").strip()
                if tag == "skipped":
                    phase.skips[case.message or "no reason given"] += 1
                break
        phase.counts[case.outcome] += 1
        cases.append(case)
    return cases


RESULTS = ROOT / "build" / "test-results"


def keep_times(phases_run: list[Phase], cases: list[Case], dest: Path = RESULTS) -> Path:
    """Every test's time and outcome, slowest first, with its phase, as a TSV under build/
    (what to trim when make test nears its time limit); the phases' JUnit XML beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    where = {}
    for phase in phases_run:
        for case in read_junit(Phase(phase.key, phase.name, [], phase.junit)):
            where[case.test] = phase.key
        if phase.junit.exists():
            (dest / phase.junit.name).write_bytes(phase.junit.read_bytes())
    rows = sorted(cases, key=lambda c: -c.seconds)
    out = dest / "durations.tsv"
    out.write_text("seconds\tphase\toutcome\ttest\n" + "".join(
        f"{c.seconds:.2f}\t{where.get(c.test, '')}\t{c.outcome}\t{c.test}\n" for c in rows))
    return out


def wall(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def phase_line(p: Phase) -> str:
    return (f"{p.name}: {wall(p.seconds)}, pytest exit {p.code}, "
            + ", ".join(f"{p.counts[k]} {k}" for k in ("passed", "failed", "errors", "skipped")))


SLOWEST = 10


def tier_of(test: str) -> str:
    """tests/netns/test_x.py::t -> netns (the folder under tests/)."""
    parts = test.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0].split(".")[0]


def timing(cases: list[Case]) -> list[str]:
    """Each tier's test time (the sum of its tests' durations: the pure tiers' run on several
    workers at once) and the SLOWEST slowest tests."""
    if not cases:
        return []
    tiers: Counter[str] = Counter()
    for c in cases:
        tiers[tier_of(c.test)] += c.seconds
    lines = ["time per tier (sum of its tests' durations): " + ", ".join(
        f"{t} {wall(sec)}" for t, sec in sorted(tiers.items(), key=lambda kv: -kv[1]))]
    lines.append(f"the {min(SLOWEST, len(cases))} slowest tests:")
    lines += [f"  {c.seconds:7.1f} s  {c.test}"
              for c in sorted(cases, key=lambda c: -c.seconds)[:SLOWEST]]
    return lines


def elapsed(done: list[Phase]) -> float:
    """Wall time of the phases: a group's phases run side by side, so each group counts with
    its longest phase."""
    longest: dict[int, float] = {}
    for p in done:
        longest[p.group] = max(longest.get(p.group, 0.0), p.seconds)
    return sum(longest.values())


def summary(done: list[Phase], cases: list[Case] | None = None) -> list[str]:
    total: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    for p in done:
        total.update(p.counts)
        skips.update(p.skips)
    lines = [phase_line(p) for p in done]
    lines.append(f"make test: {total['passed']} passed, {total['failed']} failed, "
                 f"{total['errors']} errors, {total['skipped']} skipped in "
                 f"{wall(elapsed(done))} (wall)")
    for reason, n in sorted(skips.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  skipped {n}x: {reason}")
    lines += timing(cases or [])
    # the plain closing line: errors count as failures
    lines.append(f"tests: {total['passed']} passed, {total['failed'] + total['errors']} failed, "
                 f"{total['skipped']} skipped")
    return lines


STOPPED: list[int] = []   # the signal that stopped the run, once one came


def _terminal_sent(signum: int) -> bool:
    """A SIGINT from the terminal (Ctrl-C) reaches its whole foreground process group, the
    child included: passing it on again would interrupt the child's teardown."""
    if signum != signal.SIGINT:
        return False
    try:
        tty = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(tty) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(tty)


def call(argv: list[str], **kw: object) -> int:
    """subprocess.call, passing SIGTERM, SIGHUP and SIGINT on to the child and waiting for it:
    the child's teardown, not this script's death, ends the run."""
    return call_many([(argv, kw)])[0][0]


def call_many(runs: list[tuple[list[str], dict[str, object]]]) -> list[tuple[int, float]]:
    """Start every (argv, Popen keywords) at once, pass SIGTERM, SIGHUP and SIGINT on to each
    and wait for all; (exit code, time.monotonic() at its end) of each, in order."""
    children = [subprocess.Popen(argv, **kw) for argv, kw in runs]  # type: ignore[call-overload]

    def forward(signum: int, frame: object) -> None:
        STOPPED.append(signum)
        if not _terminal_sent(signum):
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)

    sigs = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        sigs.append(signal.SIGINT)
    old = {sig: signal.signal(sig, forward) for sig in sigs}
    ended: dict[int, tuple[int, float]] = {}
    try:
        while len(ended) < len(children):
            for i, child in enumerate(children):
                if i not in ended and child.poll() is not None:
                    ended[i] = (int(child.returncode), time.monotonic())
            if len(ended) < len(children):
                time.sleep(0.1 if len(children) > 1 else 0.01)
        return [ended[i] for i in range(len(children))]
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_group(group: list[Phase]) -> None:
    """The phases of one group side by side; each one's counts, time and output."""
    for phase in group:
        print(f"\n===== make test: {phase.name} =====" + (
            f" (output: {phase.log}, printed when it ends)" if phase.log else ""), flush=True)
    logs = [open(p.log, "w") if p.log else None for p in group]   # noqa: SIM115
    t0 = time.monotonic()
    try:
        runs = [([*p.argv, f"--junitxml={p.junit}"],
                 {"cwd": ROOT, "env": {**os.environ, PHASE_ENV: p.key},
                  **({"stdout": f, "stderr": subprocess.STDOUT} if f else {})})
                for p, f in zip(group, logs)]
        ends = call_many(runs)
    finally:
        for f in logs:
            if f:
                f.close()
    for phase, (code, end) in zip(group, ends):
        phase.code, phase.seconds = code, end - t0
    for phase in group:
        if phase.log:
            print(f"\n===== make test: {phase.name}: its output =====", flush=True)
            print(phase.log.read_text(errors="replace"), end="", flush=True)


def compile_src(root: Path = ROOT) -> str:
    """Byte-compile src/ into its __pycache__ folders (only stale or missing files), once,
    before the phases: with PYTHONDONTWRITEBYTECODE set (as on this machine) a clean clone
    has none, so every Python process of the suite (each `tunbench` a test starts, each
    guest process in the VM lab) compiled the tunbench modules it imports (a `tunbench run`'s
    tunbench imports: 0.63 s here without bytecode, 0.51 s with it). The line to print."""
    import compileall
    t0 = time.monotonic()
    ok = compileall.compile_dir(root / "src", quiet=2, workers=1)
    return (f"make test: src/ byte-compiled in {time.monotonic() - t0:.1f} s"
            + ("" if ok else " (some files did not compile: their tests will say why)"))


def main(argv: list[str]) -> int:
    python = sys.executable
    extra = argv[1:]
    if extra:   # TEST_ARGS given: the developer's own selection, one pytest
        return call([python, "-m", "pytest", *extra], cwd=ROOT)
    print(compile_src(), flush=True)
    with tempfile.TemporaryDirectory(prefix="tb-tests-") as tmp:
        done: list[Phase] = []
        cases: list[Case] = []
        all_phases = phases(python, Path(tmp))
        for g in sorted({p.group for p in all_phases}):
            group = [p for p in all_phases if p.group == g]
            run_group(group)
            for phase in group:
                cases += read_junit(phase)
                done.append(phase)
            if STOPPED:
                print(f"\nmake test: stopped by {signal.Signals(STOPPED[0]).name} during "
                      f"{' and '.join(p.name for p in group)}; its fixtures were torn down",
                      flush=True)
                return 128 + STOPPED[0]
        print("\n===== make test: all phases =====")
        print("\n".join(summary(done, cases)), flush=True)
        print(f"every test's time: {keep_times(done, cases).relative_to(ROOT)}", flush=True)
    broken = [p for p in done if p.code not in OK_CODES or p.counts["failed"]
              or p.counts["errors"]]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
