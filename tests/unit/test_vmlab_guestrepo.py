"""The guest's local apt repository (tunbench.vmlab.guestrepo), without a guest: dpkg's
status paragraphs parsed, and an installed package of this host repacked into a .deb that
dpkg-deb reads back with the package's control fields, maintainer scripts and files, indexed
with its size and SHA-256. Reads this host's dpkg database only; nothing is installed or
removed here (that part runs in the VM lab guest: tests/vmlab_sites)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.vmlab import guestrepo

STATUS = """Package: demo
Status: install ok installed
Version: 1.0-1
Conffiles:
 /etc/default/demo 0123456789abcdef0123456789abcdef
Description: a demo
 with a second line
"""


def test_fields_keep_continuation_lines() -> None:
    got = dict(guestrepo.fields(STATUS))
    assert got["Package"] == "demo" and got["Version"] == "1.0-1"
    assert got["Description"] == "a demo\n with a second line"
    assert got["Conffiles"].split() == ["/etc/default/demo", "0123456789abcdef0123456789abcdef"]


def _installed(pkg: str) -> bool:
    r = proc.run(["dpkg-query", "-W", "-f=${Status}", pkg], check=False, timeout=20)
    return r.ok and r.stdout.endswith("installed")


@pytest.mark.skipif(proc.which("dpkg-deb") is None or not _installed("iperf3"),
                    reason="needs dpkg and the iperf3 package installed here")
def test_repack_of_an_installed_package_is_that_package(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    deb = guestrepo.repack("iperf3", repo, tmp_path / "stage")
    info = proc.run(["dpkg-deb", "-f", str(deb)], timeout=30).stdout
    status = dict(guestrepo.fields(proc.run(["dpkg-query", "-s", "iperf3"], timeout=30).stdout))
    control = dict(guestrepo.fields(info))
    assert control["Package"] == "iperf3" and control["Version"] == status["Version"]
    assert control["Depends"] == status["Depends"]
    assert not set(guestrepo.STATUS_ONLY) & set(control)
    listing = proc.run(["dpkg-deb", "-c", str(deb)], timeout=30).stdout
    assert "./usr/bin/iperf3" in listing and "root/root" in listing
    members = proc.run(["dpkg-deb", "-I", str(deb)], timeout=30).stdout
    assert "postinst" in members and "conffiles" in members
    shipped = Path("/usr/bin/iperf3").read_bytes()
    extracted = tmp_path / "x"
    proc.run(["dpkg-deb", "-x", str(deb), str(extracted)], timeout=30)
    assert (extracted / "usr/bin/iperf3").read_bytes() == shipped
    index = guestrepo.index(repo)
    para = dict(guestrepo.fields(index))
    assert para["Filename"] == "./iperf3.deb" and int(para["Size"]) == deb.stat().st_size
    assert para["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
