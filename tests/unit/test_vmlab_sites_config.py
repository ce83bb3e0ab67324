"""The two-guest tier's per-run files (tunbench.vmlab.sites), without booting: the private
ssh config read back by the real OpenSSH client (`ssh -G`), known_hosts looked up by the real
`ssh-keygen -F`, the modes of every secret, and the qemu network options (nothing but a
loopback port and unix sockets in the run's directory)."""

from __future__ import annotations

import json
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.vmlab import sites

pytestmark = pytest.mark.skipif(proc.which("ssh-keygen") is None or proc.which("ssh") is None,
                                reason="OpenSSH client not installed (apt-get install "
                                       "openssh-client)")


@pytest.fixture
def pair() -> Iterator[sites.SitePair]:
    p = sites.SitePair(Path(tempfile.mkdtemp(prefix="tb-test-sites-")))
    try:
        sites._write_keys_and_config(p)
        yield p
    finally:
        p.close()
        assert not p.dir.exists()


def ssh_g(pair: sites.SitePair, target: str) -> dict[str, str]:
    out = proc.run(["ssh", "-G", "-F", str(pair.ssh_config), target], timeout=20).stdout
    return {k: v for k, _, v in (ln.partition(" ") for ln in out.splitlines())}


def test_ssh_config_reaches_each_guest_on_its_own_port_with_strict_keys(
        pair: sites.SitePair) -> None:
    ports = set()
    for name in ("a", "b"):
        g = ssh_g(pair, pair.target(name))
        alias = f"tb-vm-{name}"
        assert g["hostname"] == "127.0.0.1" and g["user"] == "root"
        assert int(g["port"]) == pair.sites[name].port
        assert g["hostkeyalias"] == alias
        assert g["identitiesonly"] == "yes"
        assert g["identityfile"] == str(pair.client_key)
        assert g["userknownhostsfile"] == str(pair.known_hosts)
        ports.add(g["port"])
        # the guest's own host key, and only it, is known under its alias
        found = proc.run(["ssh-keygen", "-F", alias, "-f", str(pair.known_hosts)],
                         timeout=20).stdout
        pub = (pair.sites[name].share / "host_ed25519_key.pub").read_text().split()[1]
        assert pub in found
        other = (pair.sites["b" if name == "a" else "a"].share /
                 "host_ed25519_key.pub").read_text().split()[1]
        assert other not in found
    assert len(ports) == 2
    assert pair.site_args() == ["--site", "a=root@tb-vm-a", "--site", "b=root@tb-vm-b",
                                "--ssh-config", str(pair.ssh_config)]


def test_secrets_are_private(pair: sites.SitePair) -> None:
    assert stat.S_IMODE(pair.dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(pair.client_key.stat().st_mode) == 0o600
    for s in pair.sites.values():
        assert stat.S_IMODE(s.share.stat().st_mode) == 0o700
        assert stat.S_IMODE((s.share / "host_ed25519_key").stat().st_mode) == 0o600
        # the guest gets the client's public key, never its private one
        assert (s.share / "authorized_keys").read_text() == \
            Path(f"{pair.client_key}.pub").read_text()
        assert not any("PRIVATE" in p.read_text(errors="replace")
                       for p in s.share.iterdir() if p.name != "host_ed25519_key")


def test_guest_network_is_loopback_port_and_unix_sockets_only(pair: sites.SitePair) -> None:
    a, b = pair.sites["a"], pair.sites["b"]
    args = sites.nic_args(pair, a)
    netdevs = [args[i + 1] for i, x in enumerate(args) if x == "-netdev"]
    user, dgram = netdevs
    assert "restrict=on" in user
    assert f"hostfwd=tcp:127.0.0.1:{a.port}-10.0.2.15:22" in user
    assert f"local.path={pair.dir / 'ul-a.sock'}" in dgram
    assert f"remote.path={pair.dir / 'ul-b.sock'}" in dgram
    # each guest routes the other's SSH address over the underlay (how --site finds it)
    ca = json.loads((a.share / "site.json").read_text())
    cb = json.loads((b.share / "site.json").read_text())
    assert ca["peer_mgmt4"] == cb["mgmt4"].split("/")[0]
    assert ca["peer_underlay4"] == cb["underlay4"]
    assert ca["mgmt4"] != cb["mgmt4"] and ca["underlay_mac"] != cb["underlay_mac"]
    job = json.loads((a.share / "job.json").read_text())
    assert job["command"][-2].endswith("vmlab/sitehost.py") and job["site"] is None
    assert "virtio_net" in job["modules"]
    assert ca["without"] == cb["without"] == []   # both guests as the image has them


def test_a_guest_without_a_package_is_told_so_in_its_site_file() -> None:
    p = sites.SitePair(Path(tempfile.mkdtemp(prefix="tb-test-sites-")))
    try:
        sites._write_keys_and_config(p, {"b": ["iperf3"]})
        cfg = {n: json.loads((p.sites[n].share / "site.json").read_text()) for n in "ab"}
        assert cfg["a"]["without"] == [] and cfg["b"]["without"] == ["iperf3"]
    finally:
        p.close()
