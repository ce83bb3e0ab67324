"""Placeholder proofs that the VM lab kernel has what the host lacks.

Each test builds one tunnel between two namespaces, pings through it and checks the tunnel
device's counters moved. The tunnel drivers' own tests will replace these.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tunbench import proc


def counters(ns: str, dev: str) -> tuple[int, int]:
    """(tx packets, rx packets) of a device."""
    out = proc.run(["ip", "-j", "-s", "link", "show", "dev", dev], netns=ns).stdout
    stats = json.loads(out)[0]["stats64"]
    return stats["tx"]["packets"], stats["rx"]["packets"]


def up_inner(pair, dev: str, inner: tuple[str, str]) -> None:
    for ns, ip in ((pair.a, inner[0]), (pair.b, inner[1])):
        proc.run(["ip", "addr", "add", f"{ip}/30", "dev", dev], netns=ns)
        proc.run(["ip", "link", "set", dev, "up"], netns=ns)


def ping_and_check(pair, dev: str, target: str) -> None:
    before = counters(pair.a, dev)
    proc.run(["ping", "-c", "3", "-i", "0.2", "-W", "3", target], netns=pair.a, timeout=30)
    after = counters(pair.a, dev)
    assert after[0] >= before[0] + 3, (before, after)
    assert after[1] >= before[1] + 3, (before, after)


def test_geneve(nspair) -> None:
    dev = nspair.name("gnv")
    for ns, remote in ((nspair.a, nspair.ip_b), (nspair.b, nspair.ip_a)):
        proc.run(["ip", "link", "add", dev, "type", "geneve", "id", "42", "remote", remote],
                 netns=ns)
    up_inner(nspair, dev, ("10.201.0.1", "10.201.0.2"))
    ping_and_check(nspair, dev, "10.201.0.2")


def test_gre(nspair) -> None:
    dev = nspair.name("gre")
    for ns, local, remote in ((nspair.a, nspair.ip_a, nspair.ip_b),
                              (nspair.b, nspair.ip_b, nspair.ip_a)):
        proc.run(["ip", "link", "add", dev, "type", "gre", "local", local, "remote", remote,
                  "ttl", "64"], netns=ns)
    up_inner(nspair, dev, ("10.202.0.1", "10.202.0.2"))
    ping_and_check(nspair, dev, "10.202.0.2")


def write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def test_wireguard(nspair, tmp_path: Path) -> None:
    dev = nspair.name("wg")
    keys = {}
    for side in ("a", "b"):
        private = proc.run(["wg", "genkey"]).stdout.strip()
        public = proc.run(["wg", "pubkey"], input=private + "\n").stdout.strip()
        write_secret(tmp_path / f"{side}.key", private + "\n")
        keys[side] = public
    assert (tmp_path / "a.key").stat().st_mode & 0o777 == 0o600
    sides = (("a", nspair.a, "b", nspair.ip_b, "10.203.0.2"),
             ("b", nspair.b, "a", nspair.ip_a, "10.203.0.1"))
    for side, ns, peer, peer_ip, peer_inner in sides:
        proc.run(["ip", "link", "add", dev, "type", "wireguard"], netns=ns)
        proc.run(["wg", "set", dev, "private-key", str(tmp_path / f"{side}.key"),
                  "listen-port", "51820", "peer", keys[peer], "allowed-ips",
                  f"{peer_inner}/32", "endpoint", f"{peer_ip}:51820"], netns=ns)
    up_inner(nspair, dev, ("10.203.0.1", "10.203.0.2"))
    ping_and_check(nspair, dev, "10.203.0.2")
