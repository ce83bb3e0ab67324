"""Names fit IFNAMSIZ and carry the prefix; the process helper refuses shell strings."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.errors import CommandFailed, UnavailableError
from tunbench.testbed import names


def test_names() -> None:
    rid = names.new_run_id()
    assert len(rid) == names.RUN_ID_LEN
    ns = names.netns_name(rid, "a")
    assert names.is_ours_netns(ns) and ns.startswith("tb-")
    link = names.link_name(rid, "ua")
    assert names.is_ours_link(link) and len(link) <= 15
    with pytest.raises(ValueError, match="longer than 15"):
        names.link_name(rid, "waytoolongsuffix")
    assert not names.is_ours_netns("tbx-12345-a") and not names.is_ours_link("eth0")


def test_run_refuses_shell_strings() -> None:
    with pytest.raises(TypeError, match="never a shell string"):
        proc.run("echo hi")  # type: ignore[arg-type]


def test_run_failure_is_one_line() -> None:
    with pytest.raises(CommandFailed) as e:
        proc.run(["ls", "/nonexistent-tunbench"])
    assert "\n" not in e.value.message and "exit 2" in e.value.message


def test_run_timeout() -> None:
    with pytest.raises(CommandFailed, match="timed out after 0.2s"):
        proc.run(["sleep", "5"], timeout=0.2)


def test_missing_tool_names_package() -> None:
    with pytest.raises(UnavailableError) as e:
        proc.require("wireguard-go-not-a-tool")
    assert "apt-get install" in e.value.hint


def test_spawn_and_stop_by_pid(tmp_path) -> None:
    p = proc.spawn(["sleep", "30"], log_path=tmp_path / "s.log", label="sleeper")
    assert proc.pid_alive(p.pid, p.starttime)
    p.stop(grace=1)
    assert not proc.pid_alive(p.pid, p.starttime)
    # a PID whose start time does not match is not ours: nothing is signalled
    assert proc.kill_pid(1, starttime=-1) is False


def test_kill_pid_leaves_no_zombie_of_a_child() -> None:
    """The ledger stops daemons with kill_pid: a child it killed must be reaped, not left as
    a zombie whose /proc entry (comm included) still looks like the daemon."""
    for _ in range(20):
        p = proc.spawn(["sleep", "30"], label="sleeper")
        assert proc.kill_pid(p.pid, p.starttime, grace=2.0)
        assert not Path(f"/proc/{p.pid}").exists()
    # a child that exited on its own before teardown (a daemon that died) is reaped too
    p = proc.spawn(["true"], label="quitter")
    while proc.pid_alive(p.pid, p.starttime):
        time.sleep(0.01)
    assert Path(f"/proc/{p.pid}").exists()   # a zombie now
    assert proc.kill_pid(p.pid, p.starttime) is False
    assert not Path(f"/proc/{p.pid}").exists()


def test_vmlab_host_packages_are_installed_by_make() -> None:
    from pathlib import Path

    from tunbench.vmlab.image import HOST_PACKAGES
    listed = Path(__file__).parents[2] / "deps" / "apt-vmlab.txt"
    pkgs = {line.split("#")[0].strip() for line in listed.read_text().splitlines()} - {""}
    assert set(HOST_PACKAGES.values()) <= pkgs
