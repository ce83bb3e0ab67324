"""Runs INSIDE a VM lab guest (sitehost.py): turn installed Debian packages into a local apt
repository and take them off the guest, so the guest is a host that lacks them and whose own
apt-get can install them again, with no network (the guest has none).

For each package named: its installed files (dpkg's file list), its control fields as dpkg
recorded them and its maintainer scripts become a .deb again (`dpkg-deb --build`, the files
root-owned as Debian ships them); then `dpkg --purge` removes it. The repository is a flat one
(`deb [trusted=yes] file:/srv/tb-repo ./`: a Packages index with each .deb's control, size and
SHA-256) and becomes the guest's only apt source; `apt-get update` reads it. What installs the
package afterwards (tunbench prepare) runs the guest's real apt-get and dpkg, its maintainer
scripts included. The rootfs is a per-boot snapshot: nothing of this outlives the boot.
Only the standard library and tunbench.proc (Debian's python3, no site-packages).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from tunbench import proc

REPO = Path("/srv/tb-repo")
INFO = Path("/var/lib/dpkg/info")
# control fields of dpkg's status database that are not part of a package's control file
STATUS_ONLY = ("Status", "Conffiles", "Config-Version")
SCRIPTS = ("preinst", "postinst", "prerm", "postrm", "config")
CONTROL_FILES = ("templates", "triggers", "shlibs", "symbols", "md5sums")
ENV = {"DEBIAN_FRONTEND": "noninteractive"}


def fields(text: str) -> list[tuple[str, str]]:
    """RFC 822 paragraphs of dpkg (one): (name, value with its continuation lines)."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and out:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
        elif ":" in line:
            name, _, value = line.partition(":")
            out.append((name, value.strip()))
    return out


def info_file(pkg: str, suffix: str) -> Path | None:
    """dpkg's info file of an installed package (multi-arch ones carry :ARCH)."""
    for name in (f"{pkg}.{suffix}", f"{pkg}:amd64.{suffix}"):
        if (INFO / name).exists():
            return INFO / name
    return None


def repack(pkg: str, out: Path, stage: Path) -> Path:
    """The installed package `pkg` as a .deb in `out` (built in `stage`)."""
    status = proc.run(["dpkg-query", "-s", pkg], timeout=60).stdout
    control = fields(status)
    root = stage / pkg
    (root / "DEBIAN").mkdir(parents=True)
    listing = info_file(pkg, "list")
    if listing is None:
        raise SystemExit(f"no file list for installed package {pkg}")
    for line in listing.read_text().splitlines():
        src = Path(line)
        if line in ("", "/.") or not (src.exists() or src.is_symlink()):
            continue
        dst = root / line.lstrip("/")
        if src.is_dir():   # a directory of the package (/lib too, a link on merged /usr)
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copystat(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    text = "".join(f"{k}: {v}\n" for k, v in control if k not in STATUS_ONLY)
    (root / "DEBIAN" / "control").write_text(text)
    conf = dict(control).get("Conffiles", "")
    conffiles = [ln.split()[0] for ln in conf.splitlines() if ln.strip()]
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    for suffix in (*SCRIPTS, *CONTROL_FILES):
        script = info_file(pkg, suffix)
        if script is not None:
            shutil.copyfile(script, root / "DEBIAN" / suffix)
            os.chmod(root / "DEBIAN" / suffix, 0o755 if suffix in SCRIPTS else 0o644)
    deb = out / f"{pkg}.deb"
    proc.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], timeout=300)
    return deb


def index(repo: Path) -> str:
    """The flat repository's Packages index: each .deb's control, Filename, Size, SHA256."""
    paras = []
    for deb in sorted(repo.glob("*.deb")):
        control = proc.run(["dpkg-deb", "-f", str(deb)], timeout=60).stdout.rstrip("\n")
        data = deb.read_bytes()
        paras.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                     f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    return "\n".join(paras)


def serve_without(packages: list[str]) -> list[str]:
    """Repack `packages`, purge them, make the local repository the only apt source and read
    it; what apt-get would now install (lines for the console)."""
    REPO.mkdir(parents=True, exist_ok=True)
    stage = Path("/var/tmp/tb-repack")
    shutil.rmtree(stage, ignore_errors=True)
    for pkg in packages:
        repack(pkg, REPO, stage)
    shutil.rmtree(stage, ignore_errors=True)
    (REPO / "Packages").write_text(index(REPO))
    os.chmod(REPO, 0o755)
    for f in REPO.iterdir():
        os.chmod(f, 0o644)
    proc.run(["dpkg", "--purge", *packages], timeout=300, env=ENV)
    Path("/etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{REPO} ./\n")
    for extra in Path("/etc/apt/sources.list.d").glob("*"):
        extra.unlink()
    proc.run(["apt-get", "update"], timeout=300, env=ENV)
    policy = proc.run(["apt-cache", "policy", *packages], timeout=60).stdout
    return [ln.strip() for ln in policy.splitlines() if ln.strip()]
