"""Boot the VM lab image under qemu, run one command inside, collect what it wrote.

The guest has no network device to the outside (`-nic none`, no user-mode networking); it
talks to the host only through virtio-9p shares: this project tree (src/, tests/) and the host's
site-packages (read-only) and a per-boot results directory (writable), which also carries the
job description in. The tree is shared whole so pytest in the guest sees the same rootdir,
config and conftest files as on the host. The serial console goes to a log file. qemu is
stopped by PID on every exit path and the per-boot temp directory is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc, tunnels
from ..errors import CommandFailed, UnavailableError
from .image import PDEATHSIG, Image, cache_root

ACCEL_ENV = "TUNBENCH_VMLAB_ACCEL"  # auto (default: KVM if it boots here, else TCG), tcg, kvm
SITE_ENV = "TUNBENCH_VMLAB_SITE"  # host site-packages to share; empty string: share none
BOOT_MARGIN = 120.0  # seconds allowed on top of the job timeout for boot and power-off
READY_TIMEOUT = {"tcg": 180.0, "kvm": 45.0}  # boot to "guest ready", else the attempt failed

# Loaded in the guest before the command runs; missing ones are reported, not fatal.
# The testbed's and workloads' own modules (and the x86 crypto accelerators ESP and WireGuard
# use when present, and the IPv6/FOU siblings of the kernel link kinds) ...
BASE_MODULES: tuple[str, ...] = (
    "veth", "dummy", "tun", "ip6_gre", "ip6_tunnel", "fou", "aesni_intel",
    "ghash_clmulni_intel",
    "sch_netem", "sch_fq", "sch_tbf", "sch_htb", "ifb", "act_mirred", "cls_bpf", "sch_ingress",
    "af_packet",
)
# ... and every module a tunnel driver declares (tunnels/base.py `needs`): a new kernel kind
# is loaded in the lab without touching this file.
DEFAULT_MODULES: tuple[str, ...] = tuple(dict.fromkeys(
    [*BASE_MODULES, *tunnels.kernel_modules()]))

KERNEL_ARGS = ("console=ttyS0", "cryptomgr.notests", "panic=-1", "mitigations=off",
               "loglevel=4", "rw")


READY_MARK = "tunbench-vmlab: guest ready"
TEMP_PREFIX = "tunbench-vmlab-"


class GuestJobError(CommandFailed):
    """The guest booted but its job did not complete (timeout, or the job itself broke).

    Distinct from a failure to build or boot the VM, which means "the lab is unavailable here".
    """


@dataclass
class GuestRun:
    """What one boot produced. `files` holds the text files the guest left in /results."""

    exit_code: int | None
    status: dict[str, object]
    job_log: str
    console: str
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # qemu start to exit, for the attempt that ran the job
    ready_seconds: float | None = None  # qemu start to "guest ready" (boot time)
    boot_mode: str = ""
    accel: str = ""


def project_root() -> Path:
    """The tree holding src/tunbench (this checkout)."""
    return Path(__file__).resolve().parents[3]


def host_site_packages(image: Image) -> Path | None:
    """Host site-packages to share with the guest, if the Python versions match."""
    env = os.environ.get(SITE_ENV)
    if env is not None:
        return Path(env) if env else None
    host_ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    if host_ver != image.python_version:
        return None  # compiled or version-specific code would not import: Debian's packages
    site = Path(sysconfig.get_paths()["purelib"])
    return site if site.is_dir() else None


def compile_tree(root: Path, image: Image) -> None:
    """Byte-compile the tree's src/ into its __pycache__ folders (as any Python run that may
    write bytecode leaves them), when the guest's Python reads this one's bytecode (same
    minor version). The guest sees the tree read-only with PYTHONDONTWRITEBYTECODE: without
    them every Python process there (pytest, each `tunbench run` a guest test starts)
    compiles every tunbench module it imports, under TCG. Only stale or missing files are
    compiled: seconds once, then nothing."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" != image.python_version:
        return   # a guest Python of another version would not read them
    import compileall
    compileall.compile_dir(root / "src", quiet=2, workers=1)


def qemu_argv(qemu: str, image: Image, *, boot_mode: str, accel_kind: str, console: Path,
              shares: dict[str, tuple[Path, bool]], memory_mb: int = 2048, cpus: int = 2,
              nics: tuple[str, ...] = ()) -> list[str]:
    """The qemu command line. `nics` (netdev/device options) replaces `-nic none`: only the
    two-guest tier (sites.py) gives its guests network devices."""
    kernel = image.vmlinux if boot_mode == "pvh" else image.bzimage
    cpu = "host" if accel_kind == "kvm" else "max"
    argv = [qemu, "-accel", accel_kind, "-cpu", cpu, "-smp", str(cpus), "-m", str(memory_mb),
            "-nographic", "-nodefaults", *(nics or ("-nic", "none")), "-no-reboot",
            "-monitor", "none",
            "-serial", f"file:{console}",
            "-kernel", str(kernel), "-initrd", str(image.initrd),
            "-append", " ".join(KERNEL_ARGS),
            "-drive", f"file={image.rootfs},format=raw,if=virtio,snapshot=on"]
    for tag, (path, readonly) in shares.items():
        opts = f"local,path={path},mount_tag={tag},security_model=none,multidevs=remap"
        argv += ["-virtfs", opts + (",readonly=on" if readonly else "")]
    return argv


def boot(image: Image, command: list[str], *, timeout: float = 600.0,
         modules: tuple[str, ...] = DEFAULT_MODULES, env: dict[str, str] | None = None,
         collect: tuple[str, ...] = ("junit.xml",)) -> GuestRun:
    """Boot, run `command` in the guest (cwd: the project tree), power off, return the run.

    `collect` names text files the guest writes under /results to bring back. Raises
    CommandFailed if the guest never finished the job (boot failure, timeout).
    """
    qemu = proc.require("qemu-system-x86_64")
    root = project_root()
    compile_tree(root, image)
    _sweep_orphan_tempdirs()
    base = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    try:
        (base / "owner").write_text(f"{os.getpid()} {proc.proc_starttime(os.getpid())}\n")
        results = base / "results"
        results.mkdir()
        shares: dict[str, tuple[Path, bool]] = {"tbresults": (results, False),
                                                "tbtree": (root, True)}
        site = host_site_packages(image)
        if site is not None:
            shares["tbsite"] = (site, True)
        job = {"command": list(command), "timeout": timeout, "modules": list(modules),
               "env": env or {}, "cwd": "/mnt/tb",
               "site": "/mnt/site" if site is not None else None}
        (results / "job.json").write_text(json.dumps(job, indent=2))
        attempts = [(k, m) for k in accels() for m in (["pvh", "bzimage"] if image.pvh
                                                        else ["bzimage"])]
        failures: list[str] = []
        for i, (kind, mode) in enumerate(attempts):
            t0 = time.monotonic()
            console = base / f"console-{kind}-{mode}.log"
            rc, text, ready_s = _run_qemu(qemu_argv(qemu, image, boot_mode=mode, accel_kind=kind,
                                           console=console, shares=shares),
                                 base / f"qemu-{kind}-{mode}.log", console,
                                 timeout + BOOT_MARGIN, READY_TIMEOUT[kind])
            if READY_MARK in text or i == len(attempts) - 1:
                break
            failures.append(f"{kind}/{mode}: exit {rc}")
            if kind == "kvm" and all(k == "tcg" for k, _ in attempts[i + 1:]):
                _remember_kvm_fails()
        run = _collect(results, rc, text, time.monotonic() - t0, mode, kind, collect, failures)
        run.ready_seconds = ready_s
        return run
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _sweep_orphan_tempdirs() -> None:
    """Remove per-boot temp dirs whose owning process is gone (it was SIGKILLed)."""
    for d in Path(tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        try:
            pid, start = (d / "owner").read_text().split()
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if not proc.pid_alive(int(pid), None if start == "None" else int(start)):
            shutil.rmtree(d, ignore_errors=True)


def _kvm_probe_file() -> Path:
    return cache_root() / "kvm-probe.json"


def _remember_kvm_fails() -> None:
    with contextlib.suppress(OSError):
        _kvm_probe_file().write_text(json.dumps({"host_kernel": os.uname().release,
                                                 "kvm_boots": False}) + "\n")


def accels() -> list[str]:
    """Accelerators to try in order. auto: KVM first unless it is known not to boot here."""
    choice = os.environ.get(ACCEL_ENV, "auto")
    if choice not in ("auto", "tcg", "kvm"):
        raise UnavailableError(f"{ACCEL_ENV}={choice} is not supported", "use auto, tcg or kvm")
    kvm_ok = os.access("/dev/kvm", os.R_OK | os.W_OK)
    if choice == "kvm" and not kvm_ok:
        raise UnavailableError("/dev/kvm is not usable", f"unset {ACCEL_ENV} to use TCG")
    if choice != "auto":
        return [choice]
    try:
        probe = json.loads(_kvm_probe_file().read_text())
        known_bad = probe.get("host_kernel") == os.uname().release and not probe["kvm_boots"]
    except (OSError, ValueError, KeyError):
        known_bad = False
    return ["kvm", "tcg"] if kvm_ok and not known_bad else ["tcg"]


def _run_qemu(argv: list[str], log: Path, console: Path, timeout: float,
              ready_timeout: float) -> tuple[int | None, str, float | None]:
    """Run qemu to its exit: (exit code, console, seconds to ready). Stopped early (exit None)
    if the guest is not ready within ready_timeout; CommandFailed/GuestJobError past timeout."""
    p = proc.spawn([*PDEATHSIG, *argv], log_path=log, label="qemu")
    start = time.monotonic()
    ready = False
    ready_s: float | None = None
    try:
        while True:
            rc = p.poll()
            text = console.read_text(errors="replace") if console.exists() else ""
            if rc is not None:
                break
            elapsed = time.monotonic() - start
            if not ready and READY_MARK in text:
                ready, ready_s = True, round(elapsed, 1)
            if not ready and elapsed > ready_timeout:
                return None, text + f"\n[host: guest not ready after {ready_timeout:g}s]", None
            if elapsed > timeout:
                cls = GuestJobError if ready else CommandFailed
                raise cls(f"VM lab guest did not power off within {timeout:g}s",
                          "see the console tail; raise the tier timeout if the guest is just "
                          "slow (TCG)", argv=argv, output=_tail(text))
            time.sleep(0.25)
    finally:
        p.stop()
    if rc != 0 and log.exists() and log.stat().st_size:
        text += "\n[qemu] " + log.read_text(errors="replace").strip()
    return rc, text, ready_s


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _collect(results: Path, rc: int | None, console: str, seconds: float, mode: str,
             kind: str, names: tuple[str, ...], failures: list[str]) -> GuestRun:
    status_file = results / "status.json"
    if not status_file.exists():
        last = (_tail(console, 1).splitlines() or ["no output"])[-1]
        cls = GuestJobError if READY_MARK in console else CommandFailed
        earlier = f" (earlier attempts: {'; '.join(failures)})" if failures else ""
        raise cls(f"VM lab guest did not finish its job (qemu exit {rc}): {last}{earlier}",
                  "the console tail shows how far the boot got", output=_tail(console))
    status = json.loads(status_file.read_text())
    job_log = (results / "job.log").read_text(errors="replace") if (
        results / "job.log").exists() else ""
    files = {n: (results / n).read_text(errors="replace") for n in names
             if (results / n).is_file()}
    code = status.get("exit_code")
    return GuestRun(code if isinstance(code, int) else None, status, job_log, console, files,
                    seconds=round(seconds, 1), boot_mode=mode, accel=kind)
