"""A test session killed with SIGTERM (a CI timeout, `kill`) tears its fixtures down, as on
Ctrl-C (tests/sigterm_teardown.py): a child pytest holds a ledgered namespace, a root-namespace
veth end and a process, as the sshd test hosts do; after SIGTERM none of them is left and the
child exits on its own. Before, such a run left tb-<rid>-m, -h1, -h2, tb<rid>m0 and two sshd
behind until `tunbench cleanup`. A child the session forks (pyroute2 does, to enter a
namespace) still dies on SIGTERM and never runs the session's teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.testbed import names, netlink

pytestmark = pytest.mark.correctness

TESTS = Path(__file__).resolve().parents[1]

CHILD = '''
import os, signal, time
from pathlib import Path
import pytest
from tunbench import proc
from tunbench.testbed import netlink
from tunbench.testbed.ledger import Ledger

@pytest.fixture
def held():
    rid = os.environ["TB_CHILD_RID"]
    ledger = Ledger(rid)
    try:
        ns = f"tb-{rid}-t"
        netlink.create_netns(ns)
        ledger.netns(ns)
        netlink.add_veth(f"tb{rid}r0", None, f"tb{rid}r1", ns)
        ledger.link(f"tb{rid}r0", None)
        p = proc.spawn(["sleep", "300"], netns=ns, label="sleeper")
        ledger.process(p)
        yield p.pid
    finally:
        ledger.close()

def test_a_forked_child_still_dies_on_sigterm(held):
    # pyroute2 forks to enter a namespace: a child must die as before, never tear down
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    assert f"tb-{os.environ['TB_CHILD_RID']}-t" in netlink.list_netns()

def test_holds(held):
    Path(os.environ["TB_CHILD_READY"]).write_text(str(held))
    time.sleep(120)
'''


def test_sigterm_tears_the_fixtures_down(tmp_path: Path) -> None:
    rid = names.new_run_id()
    (tmp_path / "test_child.py").write_text(CHILD)
    ready = tmp_path / "ready"
    env = {**os.environ, "TB_CHILD_RID": rid, "TB_CHILD_READY": str(ready),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "sigterm_teardown",
                              "-p", "no:cacheprovider", "test_child.py"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.1)
        assert ready.exists(), child.communicate(timeout=5)[0]
        sleeper = int(ready.read_text())
        assert f"tb-{rid}-t" in netlink.list_netns() and proc.pid_alive(sleeper)
        child.send_signal(signal.SIGTERM)
        out = child.communicate(timeout=30)[0]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "KeyboardInterrupt" in out and "SIGTERM" in out and "1 passed" in out, out
    assert f"tb-{rid}-t" not in netlink.list_netns(), out
    assert not [n for n in netlink.link_names(None) if n.startswith(f"tb{rid}")], out
    assert not proc.pid_alive(sleeper), out
