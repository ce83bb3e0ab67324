"""Run a pytest tier inside the VM lab guest and bring back one result per guest test.

The guest runs `python3 -m pytest <targets> --junitxml=/results/junit.xml`; the JUnit XML is
parsed here (a pure function, `parse_junit`) into GuestTestResult records keyed by the same
node ids pytest uses on the host (e.g. tests/vmlab/test_lab.py::test_tunnel_modules_loaded).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from . import image as image_mod
from .qemu import DEFAULT_MODULES, GuestJobError, GuestRun, boot, project_root

# pytest exit codes: 0 all passed, 1 some failed, 5 nothing collected. Others mean the run
# itself broke (interrupted, internal error, usage error).
_PYTEST_OK = (0, 1, 5)


@dataclass(frozen=True)
class GuestTestResult:
    nodeid: str
    outcome: str  # passed | failed | error | skipped
    duration: float
    output: str  # failure text / skip reason, then captured stdout and stderr
    message: str = ""  # one line: failure message or skip reason


@dataclass(frozen=True)
class TierRun:
    results: list[GuestTestResult]
    run: GuestRun


def pytest_argv(targets: list[str]) -> list[str]:
    # no hypothesis plugin: no guest test uses it, and importing it at the session's end
    # costs seconds under TCG (a fresh host's loaded CI ran out of time right there)
    return ["python3", "-m", "pytest", *targets, "--rootdir=/mnt/tb", "-p", "no:cacheprovider",
            "-p", "no:hypothesispytest", "-q", "-rA",
            "--junitxml=/results/junit.xml", "-o", "junit_logging=all",
            "-o", "junit_family=xunit2", "-o", "junit_duration_report=call"]


def run_tier(test_dir: str = "tests/vmlab", timeout: float = 600.0, *,
             select: list[str] | None = None,
             modules: tuple[str, ...] = DEFAULT_MODULES) -> list[GuestTestResult]:
    """Boot once, run the guest tests in `test_dir` (or only the node ids in `select`)."""
    return run_tier_full(test_dir, timeout, select=select, modules=modules).results


def run_tier_full(test_dir: str = "tests/vmlab", timeout: float = 600.0, *,
                  select: list[str] | None = None,
                  modules: tuple[str, ...] = DEFAULT_MODULES) -> TierRun:
    """Like run_tier, also returning the GuestRun (console, job log, timings)."""
    img = image_mod.ensure_image()
    run = boot(img, pytest_argv(list(select) if select else [test_dir]), timeout=timeout,
               modules=modules)
    if run.exit_code not in _PYTEST_OK or (run.exit_code != 5 and "junit.xml" not in run.files):
        last = (run.job_log.strip().splitlines() or ["no output"])[-1]
        raise GuestJobError(f"pytest in the VM lab guest broke (exit {run.exit_code}): {last}",
                            "the guest pytest output is attached", output=run.job_log)
    xml = run.files.get("junit.xml", "")
    return TierRun(parse_junit(xml, project_root()) if xml else [], run)


def _nodeid(classname: str, name: str, root: Path) -> str:
    """JUnit classname 'tests.vmlab.test_x.TestC' + name -> 'tests/vmlab/test_x.py::TestC::name'."""
    parts = classname.split(".") if classname else []
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[i:], name])
    return "::".join([classname.replace(".", "/") + ".py", name]) if classname else name


_SECTION = re.compile(r"^-+ (Captured \w+) -+$", re.M)


def _captured_sections(text: str) -> list[str]:
    """Non-empty '---- Captured Out ----' style sections pytest writes into system-out/err."""
    parts = _SECTION.split(text)
    out = [f"[guest] {parts[0].strip()}"] if parts[0].strip() else []
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        if body.strip():
            out.append(f"----- guest: {title.lower()} -----\n{body.strip()}")
    return out


def parse_junit(xml_text: str, root: Path) -> list[GuestTestResult]:
    """GuestTestResult per <testcase> in pytest's JUnit XML (pure function)."""
    tree = ET.fromstring(xml_text)
    out: list[GuestTestResult] = []
    for case in tree.iter("testcase"):
        nodeid = _nodeid(case.get("classname", ""), case.get("name", ""), root)
        outcome, message, texts = "passed", "", []
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = el.get("message", "")
                texts.append(el.text or message)
                break
        for tag in ("system-out", "system-err"):
            for el in case.findall(tag):
                texts.extend(_captured_sections(el.text or ""))
        # a failing teardown after a passing call appears as an extra <error> in the same case
        out.append(GuestTestResult(nodeid, outcome, float(case.get("time", 0.0) or 0.0),
                                   "\n".join(texts), message.splitlines()[0] if message else ""))
    return out
