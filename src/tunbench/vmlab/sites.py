"""Two VM lab guests as two SSH sites: two real kernels for `tunbench run --site`.

Each guest is the VM lab image (its own Debian kernel under qemu) with two NICs:

    host                          guest a (tb-vm-a)                 guest b (tb-vm-b)
    127.0.0.1:Pa --hostfwd-->     mgmt 10.0.2.15/24 :22 sshd        mgmt 10.0.3.15/24 :22 sshd
    127.0.0.1:Pb --hostfwd-------------------------------------->
                                  underlay 198.18.0.1/24  <--dgram-->  underlay 198.18.0.2/24

The management NIC is qemu's user-mode network with `restrict=on` (the guest cannot reach
anything; only the host's forwarded loopback port reaches its sshd). The underlay is a qemu
`dgram` netdev over two unix sockets in the run's private 0700 directory: no tap, no bridge,
no address on the host. Each guest routes the other's management address over the underlay,
so `--site a=root@tb-vm-a --site b=root@tb-vm-b` finds the underlay by itself (the route to the
other site's SSH address), as between two routed hosts.

Per run, in that directory: a client key, one host key per guest (given to its sshd through
the guest's results share and copied to tmpfs 0600 there), a known_hosts holding exactly those
two keys (under `HostKeyAlias`, so the random ports do not matter) and a private ssh config
(`--ssh-config`). tunbench reaches the guests only through that config: strict host keys, keys
only, no agent. `close()` stops both qemu processes by PID and removes the directory; qemu is
started through `setpriv --pdeathsig KILL` and the directory carries an owner file, so even a
SIGKILLed test leaves nothing the next boot does not sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..errors import CommandFailed, UnavailableError
from . import image as image_mod
from .image import PDEATHSIG, Image
from .qemu import DEFAULT_MODULES, READY_MARK, TEMP_PREFIX, accels, project_root, qemu_argv

SITE_MODULES = (*DEFAULT_MODULES, "virtio_net")
READY_TIMEOUT = 360.0   # qemu start to sshd accepting, per guest (TCG on a loaded 2-core host)
JOB_TIMEOUT = 4 * 3600.0  # the guest stops itself after this (the host stops it long before)


@dataclass(frozen=True)
class SiteLayout:
    """Addresses and MACs of one guest (fixed: each guest is its own kernel)."""

    name: str          # "a" / "b"
    mgmt_net: str      # qemu user network of this guest
    mgmt4: str
    underlay4: str     # with prefix length
    index: int

    @property
    def alias(self) -> str:
        return f"tb-vm-{self.name}"

    def macs(self) -> tuple[str, str]:
        return f"52:54:00:7b:00:{self.index:02x}", f"52:54:00:7b:01:{self.index:02x}"


LAYOUT = (SiteLayout("a", "10.0.2.0/24", "10.0.2.15/24", "198.18.0.1/24", 1),
          SiteLayout("b", "10.0.3.0/24", "10.0.3.15/24", "198.18.0.2/24", 2))


@dataclass
class GuestSite:
    layout: SiteLayout
    port: int
    share: Path                      # this guest's results share (job, keys in, logs out)
    process: proc.Process | None = None

    @property
    def console(self) -> Path:
        return self.share.parent / f"console-{self.layout.name}.log"

    def ready(self) -> bool:
        return (self.share / "sshd-ready").exists()

    def tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.console, self.share / "job.log", self.share / "sshd.log"):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class SitePair:
    """Two running guests and the private ssh config that reaches them."""

    dir: Path
    sites: dict[str, GuestSite] = field(default_factory=dict)
    boot_seconds: float = 0.0

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.dir / "client_ed25519_key"

    def target(self, name: str) -> str:
        return f"root@{self.sites[name].layout.alias}"

    def site_args(self) -> list[str]:
        """The command-line options that point tunbench at the two guests."""
        return ["--site", f"a={self.target('a')}", "--site", f"b={self.target('b')}",
                "--ssh-config", str(self.ssh_config)]

    def close(self) -> None:
        """Stop both guests by PID, remove every file of the run."""
        for site in self.sites.values():
            if site.process is not None:
                site.process.stop(grace=5.0)
                site.process = None
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port() -> int:
    """A free TCP port on the loopback (qemu binds it for hostfwd a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path, comment: str) -> str:
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
             timeout=30)
    os.chmod(path, 0o600)
    return Path(f"{path}.pub").read_text().strip()


def check_host() -> None:
    """The host tools the pair needs beyond the VM lab's own (ssh, ssh-keygen)."""
    missing = sorted({proc.package_for(t) for t in ("ssh", "ssh-keygen") if not proc.which(t)})
    if missing:
        raise UnavailableError(f"the two-guest VM tier needs {' and '.join(missing)}",
                               f"apt-get install {' '.join(missing)}")


@contextlib.contextmanager
def site_pair(image: Image | None = None, *, memory_mb: int = 1024, cpus: int = 1,
              ready_timeout: float = READY_TIMEOUT,
              without: dict[str, list[str]] | None = None) -> Iterator[SitePair]:
    """Boot two guests, yield once both sshd accept connections, always stop them.
    `without` (site -> Debian packages): that guest boots without them, its apt-get
    installing them from a local repository in the guest (vmlab/guestrepo.py; no network)."""
    check_host()
    image = image or image_mod.ensure_image()
    pair = SitePair(Path(tempfile.mkdtemp(prefix=TEMP_PREFIX)))
    try:
        (pair.dir / "owner").write_text(f"{os.getpid()} {proc.proc_starttime(os.getpid())}\n")
        _write_keys_and_config(pair, without or {})
        t0 = time.monotonic()
        for site in pair.sites.values():
            site.process = _start_guest(pair, site, image, memory_mb, cpus)
        _wait_ready(pair, ready_timeout)
        pair.boot_seconds = round(time.monotonic() - t0, 1)
        yield pair
    finally:
        pair.close()


def _write_keys_and_config(pair: SitePair,
                           without: dict[str, list[str]] | None = None) -> None:
    keygen(pair.client_key, "tunbench-vmlab-client")
    client_pub = Path(f"{pair.client_key}.pub").read_text()
    known, blocks = [], []
    for lay in LAYOUT:
        share = pair.dir / f"share-{lay.name}"
        share.mkdir(mode=0o700)
        site = GuestSite(lay, free_port(), share)
        pair.sites[lay.name] = site
        pub = keygen(share / "host_ed25519_key", f"tunbench-vmlab-{lay.alias}").split()
        known.append(f"{lay.alias} {pub[0]} {pub[1]}\n")
        (share / "authorized_keys").write_text(client_pub)
        blocks.append("\n".join([
            f"Host {lay.alias}", "  HostName 127.0.0.1", f"  Port {site.port}", "  User root",
            f"  HostKeyAlias {lay.alias}", f"  IdentityFile {pair.client_key}",
            "  IdentitiesOnly yes", "  IdentityAgent none",
            f"  UserKnownHostsFile {pair.known_hosts}", "  GlobalKnownHostsFile /dev/null",
            "  CheckHostIP no", ""]))
    pair.known_hosts.write_text("".join(known))
    pair.ssh_config.write_text("\n".join(blocks))
    for lay, peer in ((LAYOUT[0], LAYOUT[1]), (LAYOUT[1], LAYOUT[0])):
        mgmt_mac, ul_mac = lay.macs()
        cfg = {"name": lay.name, "mgmt_mac": mgmt_mac, "mgmt4": lay.mgmt4,
               "underlay_mac": ul_mac, "underlay4": lay.underlay4,
               "peer_mgmt4": peer.mgmt4.split("/")[0], "peer_underlay4": peer.underlay4,
               "without": list((without or {}).get(lay.name, []))}
        share = pair.sites[lay.name].share
        (share / "site.json").write_text(json.dumps(cfg, indent=2) + "\n")
        job = {"command": ["python3", "/mnt/tb/src/tunbench/vmlab/sitehost.py",
                           "/results/site.json"],
               "timeout": JOB_TIMEOUT, "modules": list(SITE_MODULES), "env": {},
               "cwd": "/mnt/tb", "site": None}
        (share / "job.json").write_text(json.dumps(job, indent=2) + "\n")


def nic_args(pair: SitePair, site: GuestSite) -> tuple[str, ...]:
    lay = site.layout
    other = "b" if lay.name == "a" else "a"
    mgmt_mac, ul_mac = lay.macs()
    host = lay.mgmt4.split("/")[0].rsplit(".", 1)[0] + ".2"
    guest = lay.mgmt4.split("/")[0]
    return (
        "-netdev", f"user,id=mgmt,restrict=on,net={lay.mgmt_net},host={host},"
                   f"hostfwd=tcp:127.0.0.1:{site.port}-{guest}:22",
        "-device", f"virtio-net-pci,netdev=mgmt,mac={mgmt_mac},romfile=",
        "-netdev", f"dgram,id=ul,local.type=unix,local.path={pair.dir / f'ul-{lay.name}.sock'},"
                   f"remote.type=unix,remote.path={pair.dir / f'ul-{other}.sock'}",
        "-device", f"virtio-net-pci,netdev=ul,mac={ul_mac},romfile=",
    )


def _start_guest(pair: SitePair, site: GuestSite, image: Image, memory_mb: int,
                 cpus: int) -> proc.Process:
    qemu = proc.require("qemu-system-x86_64")
    shares = {"tbresults": (site.share, False), "tbtree": (project_root(), True)}
    argv = qemu_argv(qemu, image, boot_mode="pvh" if image.pvh else "bzimage",
                     accel_kind=accels()[-1], console=site.console, shares=shares,
                     memory_mb=memory_mb, cpus=cpus, nics=nic_args(pair, site))
    return proc.spawn([*PDEATHSIG, *argv], log_path=pair.dir / f"qemu-{site.layout.name}.log",
                      label=f"qemu {site.layout.alias}")


def _wait_ready(pair: SitePair, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(s.ready() for s in pair.sites.values()):
        for s in pair.sites.values():
            assert s.process is not None
            rc = s.process.poll()
            if rc is not None:
                qlog = s.process.output().strip()
                raise UnavailableError(f"VM lab guest {s.layout.alias} exited (code {rc}) "
                                       f"before its sshd was ready: {qlog or s.tail(1)}",
                                       "see the console tail; is the image current "
                                       "(make vmlab-image)?")
        if time.monotonic() > deadline:
            late = [s for s in pair.sites.values() if not s.ready()]
            booted = [s.layout.alias for s in late if READY_MARK in _read(s.console)]
            raise CommandFailed(f"VM lab guest(s) {', '.join(s.layout.alias for s in late)} "
                                f"not serving SSH after {timeout:g}s"
                                + (f" (booted: {', '.join(booted)})" if booted else ""),
                                "the host may be overloaded (TCG); see the console tail",
                                output=late[0].tail())
        time.sleep(0.5)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
