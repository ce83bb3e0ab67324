"""Build (once) and cache the VM lab image: a Debian bookworm rootfs with a stock kernel.

The build is: debootstrap --variant=minbase (from Debian's mirror, inside a private mount and
PID namespace so nothing it mounts or starts can outlive it) -> uncompressed vmlinux + busybox
initramfs -> an ext4 image made with `mkfs.ext4 -d` (no loop mount). The result lives in
~/.cache/tunbench/vmlab/<recipe hash>/ and is rebuilt only when the recipe (package list,
boot scripts, version below) changes. A build happens in a temp dir that is renamed into place
when complete, under an exclusive lock, so a half build is never used and two builds don't
collide.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import proc, tunnels
from ..errors import CommandFailed, TunbenchError, UnavailableError
from . import initramfs

# Bump when the build steps change in a way the package list and scripts below don't show.
RECIPE_VERSION = 2
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"

# Guest packages: the guest's system, the testbed's and workloads' tools and the test runner
# (libcharon-extra-plugins: ipsec impl=libipsec next to kernel ESP; libreswan is left out: in
# bookworm it conflicts with strongswan-charon; openssh-server: the two-guest tier's sites are
# reached over SSH only, see vmlab/sites.py; bpftool: tbtun's loader, for its interop test
# against the kernel's Geneve device, tests/vmlab/test_tbtun_interop.py; the object itself is
# the host's build/bpf/tbtun.bpf.o, read through the shared tree, so no clang in the guest) ...
BASE_GUEST_PACKAGES: tuple[str, ...] = (
    "linux-image-amd64", "kmod", "iproute2", "iputils-ping", "procps", "ethtool", "tcpdump",
    "iperf3", "sockperf", "libcharon-extra-plugins", "python3", "python3-pytest",
    "python3-pyroute2", "openssh-server", "bpftool",
)
# ... and the packages the tunnel drivers declare for their kernel implementations (kernel
# WireGuard's wg, kernel ESP's charon/swanctl, the OVS system datapath's daemons).
GUEST_PACKAGES: tuple[str, ...] = tuple(dict.fromkeys(
    [*BASE_GUEST_PACKAGES, *tunnels.kernel_impl_packages()]))

# Host tools the VM lab needs -> Debian package (the Makefile installs these; see docs/vmlab.md).
HOST_PACKAGES: dict[str, str] = {
    "debootstrap": "debootstrap",
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "mkfs.ext4": "e2fsprogs",
    "unshare": "util-linux",
    "setpriv": "util-linux",
}

BUILD_TIMEOUT = 1200.0
# Prefix for long-lived children: they get SIGKILL when the process that started them dies,
# so no build or VM outlives a killed test run. setpriv execs, so the PID stays the program's.
PDEATHSIG = ("setpriv", "--pdeathsig", "KILL")
CACHE_ENV = "TUNBENCH_VMLAB_CACHE"

# PID 1 of the guest after switch_root: mount the basics and the 9p shares the host offers,
# run the per-boot job (src/tunbench/vmlab/guest.py from the shared project tree), power off.
# Keep it generic: anything per-run belongs in guest.py, which needs no image rebuild.
GUEST_INIT = """#!/bin/sh
# tunbench VM lab guest init. Output goes to the serial console (the host's console log).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount --make-rshared /
hostname tbvm
ip link set lo up
modprobe -q 9pnet_virtio 2>/dev/null; modprobe -q 9p 2>/dev/null
opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $opts tbresults /results || echo "tunbench-vmlab: no results share"
# read-only shares do not change during a boot: cache=loose saves most 9p round trips
mount -t 9p -o $opts,ro,cache=loose tbtree /mnt/tb || echo "tunbench-vmlab: no tree share"
mount -t 9p -o $opts,ro,cache=loose tbsite /mnt/site 2>/dev/null
echo "tunbench-vmlab: guest ready"
if [ -f /results/job.json ]; then
  python3 /mnt/tb/src/tunbench/vmlab/guest.py /results/job.json
else
  echo "tunbench-vmlab: no job"
fi
echo "tunbench-vmlab: guest done"
sync
umount /results 2>/dev/null
echo o > /proc/sysrq-trigger
sleep 10
"""


@dataclass(frozen=True)
class Image:
    """A built VM lab image in its cache directory."""

    path: Path
    kernel_release: str
    python_version: str
    pvh: bool

    @property
    def vmlinux(self) -> Path:
        return self.path / "vmlinux"

    @property
    def bzimage(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.gz"

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs.ext4"


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunbench" / "vmlab"


def recipe() -> dict[str, object]:
    return {"version": RECIPE_VERSION, "suite": SUITE, "mirror": MIRROR,
            "packages": sorted(GUEST_PACKAGES), "initramfs_init": initramfs.INIT_SCRIPT,
            "initramfs_modules": list(initramfs.INITRAMFS_MODULES), "guest_init": GUEST_INIT}


def recipe_hash() -> str:
    blob = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def check_host() -> dict[str, str]:
    """Paths of the host tools; UnavailableError naming every missing package at once."""
    found = {tool: proc.which(tool) for tool in HOST_PACKAGES}
    missing = sorted({HOST_PACKAGES[t] for t, p in found.items() if p is None})
    if missing:
        raise UnavailableError(f"VM lab host tools missing: {', '.join(missing)}",
                               f"install them: apt-get install {' '.join(missing)}")
    return {t: str(p) for t, p in found.items()}


def load(path: Path) -> Image | None:
    """The image in `path` if it is a complete build, else None."""
    try:
        meta = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    img = Image(path, meta["kernel_release"], meta["python_version"], bool(meta["pvh"]))
    if not all(p.exists() for p in (img.bzimage, img.initrd, img.rootfs)):
        return None
    return img


@contextlib.contextmanager
def _locked(lock_path: Path, timeout: float) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UnavailableError(f"another VM lab build holds {lock_path}",
                                           "wait for it to finish, then retry") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_image(*, timeout: float = BUILD_TIMEOUT, log: Path | None = None) -> Image:
    """The cached image for the current recipe, building it first if needed."""
    root = cache_root()
    final = root / recipe_hash()
    img = load(final)
    if img is not None:
        return img
    tools = check_host()
    if os.geteuid() != 0:
        raise UnavailableError("building the VM lab image needs root (debootstrap)",
                               "run the build as root once; the cached image is reused")
    with _locked(root / f"{final.name}.lock", timeout):
        img = load(final)  # built by someone else while we waited
        if img is not None:
            return img
        if final.exists():
            _safe_rmtree(final)  # incomplete leftover (no manifest)
        for stale in root.glob(f".build-{final.name}-*"):
            _safe_rmtree(stale)  # a build killed half-way (we hold its lock now)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=root))
        try:
            _build(tmp, final.name, tools, timeout, log)
            os.rename(tmp, final)
        except BaseException:
            _safe_rmtree(tmp)
            raise
    img = load(final)
    assert img is not None
    return img


def _build(out: Path, rhash: str, tools: dict[str, str], timeout: float,
           log: Path | None) -> None:
    t0 = time.monotonic()
    rootdir = out / "rootfs"
    _debootstrap(rootdir, out / "debootstrap.log", timeout)
    kver = _kernel_release(rootdir)
    moddir = rootdir / "lib" / "modules" / kver
    shutil.copyfile(rootdir / "boot" / f"vmlinuz-{kver}", out / "vmlinuz")
    pvh = False
    try:
        initramfs.extract_vmlinux(out / "vmlinuz", out / "vmlinux")
        pvh = initramfs.has_pvh_note(out / "vmlinux")
    except TunbenchError:
        pass
    modules = initramfs.build_initramfs(Path(tools["busybox"]), moddir, out / "initrd.gz")
    pyver = _python_version(rootdir)
    _customize(rootdir)
    _mkfs(tools["mkfs.ext4"], rootdir, out / "rootfs.ext4")
    _safe_rmtree(rootdir)
    (out / "debootstrap.log").unlink(missing_ok=True)
    manifest = {"recipe_hash": rhash, "recipe": recipe(), "kernel_release": kver,
                "python_version": pyver, "pvh": pvh, "initramfs_modules": modules,
                "build_seconds": round(time.monotonic() - t0, 1), "built_at": time.time(),
                "host_python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if log is not None:
        log.write_text(f"built VM lab image in {manifest['build_seconds']} s\n")


def _debootstrap(rootdir: Path, log_path: Path, timeout: float) -> None:
    # Private mount + PID namespace: debootstrap's /proc, /sys mounts and any daemon a
    # postinst starts die with it, even if it is killed half-way. setpriv --pdeathsig: if
    # this Python process dies (SIGTERM, SIGKILL), unshare gets SIGKILL, and with it the rest.
    argv = [*PDEATHSIG, "unshare", "--mount", "--propagation", "private", "--pid", "--fork",
            "--kill-child", "--mount-proc",
            "debootstrap", "--variant=minbase", f"--include={','.join(GUEST_PACKAGES)}",
            SUITE, str(rootdir), MIRROR]
    p = proc.spawn(argv, log_path=log_path, label="debootstrap",
                   env={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C",
                        "INITRD": "No"})  # the Debian initrd is unused: skip making it
    try:
        rc = p.wait(timeout=timeout)
    finally:
        p.stop()
    if rc != 0:
        tail = p.log_tail(12)
        inner = rootdir / "debootstrap" / "debootstrap.log"  # dpkg's own errors, if any
        if inner.exists():
            tail += "\n" + "\n".join(inner.read_text(errors="replace").splitlines()[-12:])
        errors = [ln for ln in tail.splitlines() if ln.startswith("E:") or "conflict" in ln]
        last = (errors or tail.splitlines() or [""])[-1]
        if rc < 0:
            what, hint = f"was killed by signal {-rc}", "a timeout or an outside kill; rerun"
        elif "conflict" in tail or "Couldn't find" in tail or "Failure while installing" in tail:
            what, hint = f"failed (exit {rc})", "a package in GUEST_PACKAGES cannot be installed"
        else:
            what, hint = (f"failed (exit {rc})",
                          "check that Debian's mirror is reachable and ~3 GiB of disk is free")
        raise CommandFailed(f"debootstrap of the VM lab rootfs {what}: {last}", hint,
                            argv=argv, returncode=rc, output=tail)


def _kernel_release(rootdir: Path) -> str:
    releases = sorted(p.name for p in (rootdir / "lib" / "modules").iterdir() if p.is_dir())
    if len(releases) != 1 or not (rootdir / "boot" / f"vmlinuz-{releases[0]}").exists():
        raise UnavailableError(f"expected one kernel in the rootfs, found {releases}",
                               "delete the VM lab cache directory and rebuild")
    return releases[0]


def _python_version(rootdir: Path) -> str:
    target = os.readlink(rootdir / "usr" / "bin" / "python3")  # e.g. "python3.11"
    return target.removeprefix("python")


def _customize(rootdir: Path) -> None:
    init = rootdir / initramfs.GUEST_INIT_PATH.lstrip("/")
    init.write_text(GUEST_INIT)
    init.chmod(0o755)
    (rootdir / "etc" / "hostname").write_text("tbvm\n")
    (rootdir / "etc" / "hosts").write_text("127.0.0.1 localhost tbvm\n::1 localhost\n")
    for d in ("mnt/tb", "mnt/site", "results"):
        (rootdir / d).mkdir(parents=True, exist_ok=True)
    # Not needed in the guest; saves ~250 MB: .debs, apt lists, the unused Debian initrd, docs.
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_Packages",
                    "boot/initrd.img-*"):
        for p in rootdir.glob(pattern):
            p.unlink()
    for d in ("usr/share/doc", "usr/share/man", "usr/share/info"):
        if (rootdir / d).is_dir():
            _safe_rmtree(rootdir / d)


def _mkfs(mkfs: str, rootdir: Path, image: Path) -> None:
    nbytes, nfiles = 0, 0
    for dirpath, dirnames, filenames in os.walk(rootdir):
        for name in filenames + dirnames:
            nfiles += 1
            with contextlib.suppress(OSError):
                nbytes += os.lstat(os.path.join(dirpath, name)).st_size
    size_mb = int(nbytes * 1.2 / 2**20) + 512  # + room for what the tests write in the guest
    proc.run([mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-L", "tbroot",
              "-N", str(nfiles * 2 + 20000), "-d", str(rootdir), str(image), f"{size_mb}M"],
             timeout=600)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            mnt = line.split()[4].replace("\\040", " ")
            if (mnt + "/").startswith(prefix):
                found.append(mnt)
    return found


def _safe_rmtree(path: Path) -> None:
    """rmtree that refuses to descend into anything mounted under `path`."""
    if not path.exists():
        return
    mounts = _mounts_under(path)
    if mounts:
        raise UnavailableError(f"refusing to delete {path}: {mounts[0]} is mounted inside",
                               f"unmount it (umount -R {mounts[0]}) and delete {path}")
    try:
        shutil.rmtree(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def cache_usage() -> dict[str, int]:
    """Bytes used per cached image directory (for docs and `doctor`)."""
    root = cache_root()
    usage: dict[str, int] = {}
    if root.is_dir():
        for d in root.iterdir():
            if d.is_dir():
                usage[d.name] = sum(f.stat().st_blocks * 512 for f in d.rglob("*") if f.is_file())
    return usage


def prune() -> list[str]:
    """Delete cached images (and stale partial builds) of recipes other than the current one.

    An image whose build lock is held (being built right now) is left alone.
    """
    root = cache_root()
    keep = recipe_hash()
    deleted: list[str] = []
    if not root.is_dir():
        return deleted
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name == keep:
            continue
        rhash = d.name.split("-")[1] if d.name.startswith(".build-") else d.name
        try:
            with _locked(root / f"{rhash}.lock", timeout=0):
                _safe_rmtree(d)
                (root / f"{rhash}.lock").unlink(missing_ok=True)
        except UnavailableError:
            continue
        deleted.append(d.name)
    return deleted
