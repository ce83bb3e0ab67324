"""Runs INSIDE a VM lab guest that serves as one SSH site of the two-guest tier (vmlab/sites.py).

Started by guest.py as the job: it configures the guest's two NICs (found by the MAC addresses
the host gave them, since there is no udev to name them), starts sshd in the foreground with
the per-run host key and authorized key the host put in the results share, says "ready" in a
file once sshd accepts connections, and then simply waits for sshd: the host ends the guest by
stopping qemu, so nothing here has to shut down cleanly (the rootfs is a snapshot).

Network of one guest (nothing of it is visible on the host but the hostfwd loopback port):
  mgmt NIC      qemu user-mode network (restrict=on: no way out), the site's SSH address;
                the host reaches sshd through hostfwd 127.0.0.1:PORT -> <mgmt4>:22
  underlay NIC  a qemu dgram link (two unix sockets in the run's private directory) to the
                other guest; the underlay tunbench puts its tunnels on. The other guest's
                management address is routed over it, so `--site` detection (the route to the
                other site's SSH address) finds the underlay, as between two routed hosts.
With `without` in site.json (package names), the guest first becomes a host that lacks those
packages and whose apt-get installs them from a local repository (guestrepo.py): what
`tunbench prepare` is tested against, with no network.
Only the standard library and tunbench.proc are used (Debian's python3, no site-packages).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, "/mnt/tb/src")

from tunbench import proc  # noqa: E402
from tunbench.vmlab import guestrepo  # noqa: E402

RUN_DIR = Path("/etc/ssh/tunbench")  # sshd StrictModes: /run is a 1777 tmpfs here
SSHD = "/usr/sbin/sshd"


def say(msg: str) -> None:
    print(f"tunbench-vmlab-site: {msg}", flush=True)


def ifname_by_mac(mac: str, timeout: float = 60.0) -> str:
    """The interface with this MAC; virtio_net probes asynchronously after modprobe."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for dev in Path("/sys/class/net").iterdir():
            addr = dev / "address"
            if addr.exists() and addr.read_text().strip().lower() == mac.lower():
                return dev.name
        time.sleep(0.2)
    raise SystemExit(f"no interface with MAC {mac} (is virtio_net loaded?)")


def configure(cfg: dict[str, str]) -> None:
    mgmt, ul = ifname_by_mac(cfg["mgmt_mac"]), ifname_by_mac(cfg["underlay_mac"])
    for argv in (["hostname", f"tb-vm-{cfg['name']}"],
                 ["ip", "link", "set", "lo", "up"],
                 ["ip", "addr", "add", cfg["mgmt4"], "dev", mgmt],
                 ["ip", "link", "set", mgmt, "up"],
                 ["ip", "addr", "add", cfg["underlay4"], "dev", ul],
                 ["ip", "link", "set", ul, "up"],
                 ["ip", "route", "add", f"{cfg['peer_mgmt4']}/32", "via",
                  cfg["peer_underlay4"].split("/")[0], "dev", ul]):
        proc.run(argv, timeout=20)
    say(f"mgmt {mgmt} {cfg['mgmt4']}, underlay {ul} {cfg['underlay4']}")


def sshd_config(keys: Path) -> str:
    return "\n".join([
        "Port 22", f"HostKey {keys / 'host_ed25519_key'}", "PidFile none",
        f"AuthorizedKeysFile {keys / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "X11Forwarding no",
        "AllowTcpForwarding no", "PermitTTY no", "PrintMotd no", "UseDNS no",
        "LogLevel VERBOSE", "MaxSessions 50", "MaxStartups 50", ""])


def start_sshd(share: Path) -> proc.Process:
    """Keys are copied off the 9p share with mode 0600 into a root-only directory of the guest (its rootfs
    is a per-boot snapshot) (sshd refuses a host key
    others can read, and 9p shows the host's modes)."""
    RUN_DIR.mkdir(mode=0o700, exist_ok=True)
    for name in ("host_ed25519_key", "authorized_keys"):
        dst = RUN_DIR / name
        shutil.copyfile(share / name, dst)
        os.chmod(dst, 0o600)
    (RUN_DIR / "sshd_config").write_text(sshd_config(RUN_DIR))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return proc.spawn([SSHD, "-D", "-e", "-f", str(RUN_DIR / "sshd_config")],
                      log_path=share / "sshd.log", label="sshd")


def wait_listening(p: proc.Process, timeout: float = 120.0) -> None:
    def accepts() -> bool:
        with socket.socket() as s:
            s.settimeout(1.0)
            return s.connect_ex(("127.0.0.1", 22)) == 0
    proc.wait_ready(p, ready=accepts, timeout=timeout)


def main(path: str) -> int:
    share = Path(path).parent
    cfg = json.loads(Path(path).read_text())
    configure(cfg)
    if cfg.get("without"):
        for line in guestrepo.serve_without(list(cfg["without"])):
            say(f"local repository: {line}")
    sshd = start_sshd(share)
    wait_listening(sshd)
    (share / "sshd-ready").write_text(f"{sshd.pid}\n")
    say("sshd ready")
    return sshd.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
