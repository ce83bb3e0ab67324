"""A schedule's systemd timer firing for real (issue 32 point 6), under a systemd that is PID 1
of its own: `systemd-nspawn --boot -D / --volatile=yes` boots this host's own /usr (its
systemd) on an empty tmpfs root, so there is no image to build or cache. PID 1 here is not
systemd, hence --register=no --keep-unit (no machined, no scope to ask for), with nspawn put
in a tb- cgroup of its own first and the container on the unified (v2) hierarchy;
--private-network gives it its own network namespace, so the campaigns' namespaces and links
stay inside it. The repository, the venv and its interpreter are bound read-only at their own
paths, one test folder read-write (schedules, results, store).

Inside, `tunbench schedule add` with a short interval installs the timer; it fires twice and
two campaigns land in the store; a firing by hand while the timer's campaign runs finds the
lock held by the service's process and is skipped and recorded; `schedule remove` leaves no
unit behind. The container, its cgroups and its files are removed on success and failure."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.store import db
from tunbench.testbed import names, netlink

pytestmark = pytest.mark.correctness

REPO = Path(__file__).resolve().parents[2]
NSPAWN = "systemd-nspawn"
CGROUPS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup"))
EVERY = 8          # seconds between the timer's starts: above a 1 s campaign's wall
CAMPAIGN = ["--tunnels", "native", "--duration", "1", "--warmup", "0", "--repeats", "1",
            "--no-report", "--quiet"]


def _blocked() -> str | None:
    """Why no systemd container can boot here, in one line naming the fix, else None."""
    if os.geteuid() != 0:
        return "booting a systemd container needs root"
    if proc.which(NSPAWN) is None:
        return "systemd-nspawn is not installed (apt-get install systemd-container)"
    if not Path("/usr/lib/systemd/systemd").exists():
        return "this host's /usr has no systemd to boot (apt-get install systemd)"
    if not (Path("/bin").is_symlink() and Path("/lib").is_symlink()):
        return "--volatile=yes needs a merged /usr (/bin, /lib symlinks into /usr) on this host"
    if not any((c / "cgroup.procs").exists() and (c / "cgroup.controllers").exists()
               for c in CGROUPS):
        return "no cgroup v2 (unified) hierarchy is mounted on this host"
    return None


@dataclass
class Machine:
    name: str
    nspawn: subprocess.Popen[bytes] | None
    leader: int              # the container's PID 1 as this host sees it
    console: Path
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """argv inside the container (its mount, PID, network, UTS, IPC, cgroup namespaces)."""
        return subprocess.run(["nsenter", "-t", str(self.leader), "-m", "-p", "-n", "-u", "-i",
                               "-C", "--", *argv], env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def tunbench(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "tunbench", *argv, timeout=timeout)

    def show(self, unit: str, prop: str) -> str:
        return self.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    def path(self, inside: str) -> Path:
        return Path(f"/proc/{self.leader}/root") / inside.lstrip("/")


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, nearest first (from each process's parent in /proc)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        kids = [k for k, pp in parent.items() if pp == todo[0]]
        out += kids
        todo = todo[1:] + kids
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cgroup_dirs(name: str) -> list[Path]:
    """The tb- cgroup of the container in each hierarchy it may appear in."""
    top = Path("/sys/fs/cgroup")
    return [c / name for c in (top, *top.iterdir()) if c.is_dir() and (c / name).is_dir()]


def _remove_cgroup(d: Path) -> None:
    for _ in range(50):
        try:
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                sub.rmdir()
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)   # a process still leaving it
    d.rmdir()


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    why = _blocked()
    if why:
        pytest.skip(f"systemd timer not testable in a container: {why}")
    rid = names.new_run_id()
    name = f"tb-sysd-{rid}"
    work = tmp_path / name
    (work / "home").mkdir(parents=True)
    links_before = set(netlink.link_names(None))
    # nspawn's own cgroup: a tb- one in the named systemd and unified hierarchies (on a
    # hybrid host nspawn copies the first into the second for a unified container)
    groups = [c / name for c in CGROUPS[:2] if (c / "cgroup.procs").exists()]
    if not groups:
        groups = [CGROUPS[2] / name]

    def enter_cgroups() -> None:
        for g in groups:
            (g / "cgroup.procs").write_text("0\n")

    venv, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
    binds = [f"--bind-ro={p}" for p in dict.fromkeys((REPO, venv, base))]
    argv = [NSPAWN, "--quiet", "--boot", "--directory=/", "--volatile=yes", "--register=no",
            "--keep-unit", "--private-network", f"--machine={name}", *binds,
            f"--bind={tmp_path}", "--console=pipe", "--",
            # PID 1's arguments: no first-boot prompt on the console, boot what timers need
            "systemd.mask=systemd-firstboot.service", "systemd.unit=basic.target"]
    console = tmp_path / f"{name}.console"
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8",
           "HOME": str(work / "home"), "PYTHONPATH": str(REPO / "src"),
           "TUNBENCH_SCHEDULE_DIR": str(work / "schedules"),
           "TUNBENCH_SCHEDULE_MIN_SECONDS": "1"}
    p: subprocess.Popen[bytes] | None = None
    m = Machine(name, None, 0, console, env)
    try:
        for g in groups:
            g.mkdir()
        with open(console, "wb") as log:
            p = m.nspawn = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env={**env, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"},
                preexec_fn=enter_cgroups, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            kids = [k for k in _descendants(p.pid) if _comm(k) == "systemd"]
            # booted: its /run/systemd/system, and the private socket systemctl talks to
            # (made a little later: before it, systemctl says "Failed to connect to bus")
            if kids and Path(f"/proc/{kids[0]}/root/run/systemd/system").is_dir() and \
                    Path(f"/proc/{kids[0]}/root/run/systemd/private").is_socket():
                m.leader = kids[0]
                break
            time.sleep(0.1)
        assert m.leader, f"no systemd booted in {name}:\n{console.read_text()[-3000:]}"
        r = m.run("systemctl", "is-system-running", "--wait", timeout=90)
        state = r.stdout.strip()
        assert state in ("running", "degraded"), \
            f"{name}: {state!r} {r.stderr.strip()!r}\n{m.run('systemctl', '--failed').stdout}\n" \
            f"{console.read_text()[-3000:]}"
        yield m
    finally:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)      # nspawn: SIGRTMIN+3 to PID 1, a clean poweroff
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                if m.leader:
                    os.kill(m.leader, signal.SIGKILL)   # its PID namespace dies with it
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        for g in _cgroup_dirs(name):
            _remove_cgroup(g)
        left = _cgroup_dirs(name)
        new_links = set(netlink.link_names(None)) - links_before
        propagate = Path("/run/systemd/nspawn/propagate") / name
        assert not left, f"cgroups left behind: {left}"
        assert not propagate.exists(), f"left behind: {propagate}"
        assert not new_links, f"links left in the host's namespace: {new_links}"


def _rows(dbfile: Path, sql: str) -> list[tuple[object, ...]]:
    if not dbfile.exists():
        return []
    conn = sqlite3.connect(dbfile, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:   # the table is created by the first firing
        return []
    finally:
        conn.close()


def _lock_holder(lock: Path, other_than: str, within: float) -> str:
    """The PID in the schedule's lock file once one other than `other_than` holds it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pid = lock.read_text().strip() if lock.exists() else ""
        if pid and pid != other_than:
            return pid
        time.sleep(0.05)
    raise AssertionError(f"no firing took {lock} within {within:g} s")


def test_timer_fires_twice_skips_an_overlap_and_is_removed(machine: Machine,
                                                             tmp_path: Path) -> None:
    m = machine
    assert m.run("readlink", "/proc/1/exe").stdout.strip().endswith("/systemd")
    work = tmp_path / m.name
    dbfile, res, sched = work / "results.db", work / "res", "tb-sysd"
    timer, service = f"tb-schedule-{sched}.timer", f"tb-schedule-{sched}.service"
    res.mkdir()
    add = m.tunbench("schedule", "add", sched, "--every", f"{EVERY}s", "--results", str(res),
                     "--db", str(dbfile), "--", *CAMPAIGN)
    assert add.returncode == 0, add.stderr
    assert f"timer /etc/systemd/system/{timer}" in add.stdout
    assert m.run("systemctl", "is-enabled", timer).stdout.strip() == "enabled"
    unit = m.path(f"/etc/systemd/system/{service}").read_text()
    assert f"Environment=PYTHONPATH={REPO / 'src'}" in unit   # the service runs this code

    # the timer's first firing (OnActiveSec=1s) takes the lock: a firing by hand now overlaps
    lock = work / "schedules" / f"{sched}.lock"
    holder = _lock_holder(lock, other_than="", within=60)
    main_pid = m.show(service, "MainPID")
    by_hand = m.tunbench("schedule", "run", sched, "--no-slip")
    assert by_hand.returncode == 0, by_hand.stderr
    assert "skipped" in by_hand.stderr and f"PID {holder}" in by_hand.stderr, by_hand.stderr
    assert holder == main_pid, f"lock held by PID {holder}, the service's is {main_pid}"

    # the second firing: a new service process takes the lock; the schedule is removed while
    # its campaign runs (so no third can start): the campaign completes, nothing is left
    second = _lock_holder(lock, other_than=holder, within=3 * EVERY + 60)
    assert second == m.show(service, "MainPID")
    remove = m.tunbench("schedule", "remove", sched)
    assert remove.returncode == 0, remove.stderr
    assert m.show(timer, "LoadState") == "not-found"
    deadline = time.monotonic() + 3 * EVERY + 60
    ran: list[tuple[object, ...]] = []
    while time.monotonic() < deadline and len(ran) < 2:
        ran = _rows(dbfile, f"SELECT started, ended, campaign_path FROM schedule_run WHERE "
                            f"schedule='{sched}' AND status='ran' ORDER BY started")
        time.sleep(0.2)
    failed = _rows(dbfile, "SELECT reason FROM schedule_run WHERE status='failed'")
    journal = m.run("journalctl", "-u", service, "--no-pager").stdout[-3000:]
    assert len(ran) == 2 and not failed, f"ran {ran}, failed {failed}\n{journal}"

    # two firings of the timer, never overlapping (systemd arms the timer again only when the
    # oneshot is done). When each came (EVERY after the first start, AccuracySec=1s) is
    # systemd's timing plus a Python start under whatever load the host has: not asserted
    (s1, e1, c1), (s2, _, c2) = ran
    assert isinstance(s1, float) and isinstance(s2, float) and isinstance(e1, float)
    assert s2 >= e1, (s1, e1, s2)
    conn = db.connect(dbfile, create=False)
    stored = sorted(p for (p,) in conn.execute("SELECT path FROM campaign"))
    assert stored == sorted([str(c1), str(c2)]) and c1 != c2
    for c in stored:
        index = json.loads((Path(c) / "index.json").read_text())
        assert index["state"] == "complete" and Path(c).parent == res / sched
    ok = conn.execute("SELECT count(*) FROM \"case\" k JOIN metric m ON m.case_row = k.id "
                      "WHERE m.name='throughput' AND k.status='ok'").fetchone()[0]
    assert ok == 2
    # the overlapping firing: skipped, recorded, naming the service's process, during run 1
    skipped = conn.execute("SELECT started, reason, campaign_path FROM schedule_run WHERE "
                           "status='skipped'").fetchall()
    assert len(skipped) == 1 and skipped[0][2] is None
    assert s1 - 0.5 <= skipped[0][0] <= e1 and f"PID {holder}" in skipped[0][1]

    # nothing of the schedule is left: no unit file, no enablement, systemd knows no unit
    # (the service's, loaded while its campaign ran, goes once it is done)
    units = m.path("/etc/systemd/system")
    assert not list(units.rglob("tb-schedule-*")), list(units.rglob("tb-schedule-*"))
    deadline = time.monotonic() + 20
    listed = "?"
    while time.monotonic() < deadline and listed:
        listed = m.run("systemctl", "list-units", "--all", "--plain", "--no-legend",
                       "tb-schedule-*").stdout.strip()
        time.sleep(0.2)
    assert listed == "", listed
    for u in (timer, service):
        assert m.show(u, "LoadState") == "not-found", u
    assert not list((work / "schedules").glob(f"{sched}*"))
    assert conn.execute("SELECT count(*) FROM schedule_run WHERE status='ran'").fetchone()[0] == 2
