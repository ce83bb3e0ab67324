"""`tunbench prepare --site`: the plan is exactly what `doctor --site` finds missing, and
`--yes` runs the host's package manager with those packages, after which a campaign runs.

The hosts are namespaces of this machine sharing its /usr: a real `apt-get install` there
would change this machine's packages (used by every other test run) and needs the network.
So on h2 iperf3 is hidden (an empty 0600 file bind-mounted over it in h2's mount namespace)
and h2's apt-get is a stub bind-mounted the same way: it records its argv and "installs"
iperf3 by removing the mount that hides it. Everything is unmounted at the end.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SshHosts

from tunbench import proc, spec
from tunbench.runner import run_campaign

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

TB = [sys.executable, "-m", "tunbench"]


def _mount(hosts: SshHosts, name: str, src: Path, dst: str) -> None:
    sshd = hosts.hosts[name].sshd
    assert sshd is not None
    proc.run(["nsenter", "-t", str(sshd.pid), "-m", "mount", "--bind", str(src), dst],
             timeout=10)


def _umount(hosts: SshHosts, name: str, dst: str) -> None:
    sshd = hosts.hosts[name].sshd
    assert sshd is not None
    while proc.run(["nsenter", "-t", str(sshd.pid), "-m", "umount", dst], timeout=10,
                   check=False).ok:
        pass      # every layer this test mounted


@pytest.fixture
def h2_without_iperf3(hosts: SshHosts, tmp_path: Path) -> Iterator[Path]:
    """iperf3 hidden on h2 and a recording apt-get stub there; yields the stub's log."""
    iperf3, apt = proc.which("iperf3"), proc.which("apt-get")
    if iperf3 is None or apt is None:
        pytest.skip("needs iperf3 and apt-get on this machine")
    blank = tmp_path / "no-iperf3"
    blank.write_bytes(b"")
    blank.chmod(0o600)
    log = tmp_path / "apt.log"
    stub = tmp_path / "apt-get"
    stub.write_text("#!/bin/sh\n"
                    f'echo "$DEBIAN_FRONTEND $*" >> {log}\n'
                    'for p; do [ "$p" = iperf3 ] && umount ' + iperf3 + "; done\nexit 0\n")
    stub.chmod(0o700)
    _mount(hosts, "h2", blank, iperf3)
    _mount(hosts, "h2", stub, apt)
    try:
        yield log
    finally:
        _umount(hosts, "h2", apt)
        _umount(hosts, "h2", iperf3)


def _plan(stdout: str, host: str) -> list[str]:
    """The packages of `host`'s line in the printed plan."""
    line = next(ln for ln in stdout.splitlines() if ln.strip().startswith(f"{host}:"))
    if "nothing to install" in line:
        return []
    cmd = line.split(":", 1)[1].split("(for")[0].split()
    return cmd[cmd.index("--no-install-recommends") + 1:]


def test_prepare_dry_run_lists_what_doctor_finds_missing(hosts: SshHosts,
                                                         h2_without_iperf3: Path) -> None:
    cfg = ["--ssh-config", str(hosts.ssh_config)]
    for host in ("h1", "h2"):
        r = proc.run(TB + ["doctor", "--site", host, *cfg, "--json"], check=False,
                     timeout=120)
        assert r.returncode == 0, r.stderr
        doctor = {cmd.split()[-1] for cmd in json.loads(r.stdout)["missing_tools"].values()}
        d = proc.run(TB + ["prepare", "--site", host, *cfg, "--dry-run"], check=False,
                     timeout=120)
        assert d.returncode == 0, d.stderr
        assert set(_plan(d.stdout, host)) == doctor, (d.stdout, doctor)
        if host == "h2":
            assert "iperf3" in doctor
    assert not h2_without_iperf3.exists()        # a dry run never runs the package manager


def test_prepare_yes_installs_and_a_campaign_runs(hosts: SshHosts, h2_without_iperf3: Path,
                                                  tmp_path: Path) -> None:
    cfg = ["--ssh-config", str(hosts.ssh_config)]
    r = proc.run(TB + ["prepare", "--site", "h1", "--site", "h2", *cfg, "--tunnels", "native",
                       "--workloads", "stream"], check=False, timeout=120, input="")
    assert r.returncode == 2 and "no terminal to ask" in r.stderr, (r.stdout, r.stderr)
    assert not h2_without_iperf3.exists()        # refused before anything was installed
    r = proc.run(TB + ["prepare", "--site", "h1", "--site", "h2", *cfg, "--tunnels", "native",
                       "--workloads", "stream", "--yes"], check=False, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "h1: nothing to install" in r.stdout
    assert _plan(r.stdout, "h2") == ["iperf3"], r.stdout
    # exactly one run of h2's package manager, with exactly the planned package
    assert h2_without_iperf3.read_text().splitlines() == [
        "noninteractive install -y --no-install-recommends iperf3"]
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                      "tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}],
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
