"""A campaign between two real kernels: two VM lab guests (each its own Debian kernel under
qemu) joined by a virtual underlay link, reached by tunbench on the host only over SSH, through
the same `--site a=... --site b=... --ssh-config FILE` a user types.

The kinds are the ones this host's kernel cannot run (Geneve, GRE, kernel WireGuard, kernel
ESP) plus native; a 1 s stream each, in one campaign (one agent start per guest; latency
between hosts is proven by tests/remote on this host's sshd hosts, and would double the
tier's time under TCG). Correctness only: TCG runs 25-30x slower than the host, so no figure is compared, only that traffic crossed each tunnel, measured
on each site apart, and that nothing is left on either guest.

Guest b boots without iperf3 (conftest.py): before the campaign, `tunbench prepare --site
root@tb-vm-b --workloads stream --yes` prints its plan and runs the guest's real apt-get, which
installs iperf3 from the local repository inside the guest (no network); the campaign's stream
cases then use it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tunbench import proc
from tunbench.remote.transport import Connection, SshOptions
from tunbench.vmlab import sites

pytestmark = [pytest.mark.vmlab, pytest.mark.slow, pytest.mark.correctness]

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "two-kernels.toml"
KINDS = ["native", "geneve", "gre", "wireguard", "ipsec"]
DAEMONS = ("iperf3", "sockperf", "charon", "tunbench-loadgen")


def guest(pair: sites.SitePair, name: str) -> Connection:
    return Connection.open(pair.target(name), options=SshOptions(config_file=pair.ssh_config),
                           name=f"check-{name}")


def cases_of(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]


def run_between(pair: sites.SitePair, experiment: Path, out: Path) -> proc.Completed:
    """`tunbench run` as a user types it, the guests named only by --site/--ssh-config."""
    return proc.run([sys.executable, "-m", "tunbench", "run", "--experiment", str(experiment),
                     *pair.site_args(), "--out", str(out), "--no-report", "--quiet"],
                    check=False, timeout=2400, cwd=ROOT)


def has_iperf3(pair: sites.SitePair, name: str) -> bool:
    with guest(pair, name) as c:
        return c.run(["sh", "-c", "command -v iperf3"], check=False).ok


@pytest.fixture(scope="module")
def prepared(pair: sites.SitePair) -> dict[str, Any]:
    """`tunbench prepare --yes` on guest b, which lacks iperf3, as a user types it; what it
    printed, and b's state before and after (over SSH)."""
    before = has_iperf3(pair, "b")
    with guest(pair, "b") as c:
        old = c.run(["cat", "/var/log/apt/history.log"], check=False).stdout
    t0 = time.monotonic()
    r = proc.run([sys.executable, "-m", "tunbench", "prepare", "--site", pair.target("b"),
                  "--ssh-config", str(pair.ssh_config), "--workloads", "stream", "--yes"],
                 check=False, timeout=1200, cwd=ROOT)
    took = time.monotonic() - t0
    with guest(pair, "b") as c:
        status = c.run(["dpkg-query", "-W", "-f=${Status}", "iperf3"], check=False).stdout
        history = c.run(["cat", "/var/log/apt/history.log"], check=False).stdout
    assert history.startswith(old), "apt's history on b was rewritten, not appended to"
    return {"before": before, "run": r, "took": took, "after": has_iperf3(pair, "b"),
            "status": status, "history": history[len(old):]}


def test_prepare_installs_what_a_guest_lacks(pair: sites.SitePair,
                                             prepared: dict[str, Any]) -> None:
    """The plan names exactly iperf3 on b, the guest's own apt-get installs it (what prepare
    added to apt's history says so), and it is there afterwards."""
    r = prepared["run"]
    print(f"prepare on tb-vm-b: {prepared['took']:.1f} s\n{r.stdout}")
    assert prepared["before"] is False, "guest b should boot without iperf3"
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    plan = [ln.strip() for ln in r.stdout.splitlines()]
    assert plan[0] == "plan:" and plan[1] == (
        f"{pair.target('b')}: apt-get install -y --no-install-recommends iperf3   "
        "(for iperf3)"), plan
    assert f"prepared: {pair.target('b')}" in plan
    assert prepared["after"] is True and prepared["status"] == "install ok installed"
    assert "Commandline: apt-get install -y --no-install-recommends iperf3" in \
        prepared["history"], prepared["history"]
    assert "Install: iperf3:amd64" in prepared["history"], prepared["history"]


@pytest.fixture(scope="module")
def campaign(pair: sites.SitePair, prepared: dict[str, Any],
             tmp_path_factory: pytest.TempPathFactory) -> tuple[
        proc.Completed, dict[tuple[str, str], dict[str, Any]], float]:
    """One campaign for the whole tier: every kind (kernel ESP included) in one `tunbench run`,
    so the guests pay the agent's start (shipping it, the first pyroute2 import under TCG)
    once, not once per experiment. It runs after `prepare` installed iperf3 on guest b."""
    out = tmp_path_factory.mktemp("two-guests") / "r"
    t0 = time.monotonic()
    r = run_between(pair, EXPERIMENT, out)
    wall = time.monotonic() - t0
    by = {(c["case"]["tunnel"]["kind"], c["case"]["workload"]["name"]): c for c in cases_of(out)}
    return r, by, wall


def test_two_kernel_campaign_over_ssh(pair: sites.SitePair, campaign) -> None:
    r, by, wall = campaign
    print(f"two-guest campaign: {wall:.1f} s wall (guests booted in {pair.boot_seconds} s)")
    summary = {f"{k}/{w}": (c["status"], c.get("error", "")) for (k, w), c in by.items()}
    print(json.dumps(summary, indent=1))
    for (kind, wl), c in by.items():
        print(f"{kind}/{wl}: " + ", ".join(f"{m}={v['value']:.4g}"
                                           for m, v in c["metrics"].items()
                                           if isinstance(v, dict)
                                           and isinstance(v.get("value"), (int, float))))
    print("clock offset b-a (ms):", [c["testbed"].get("clock", {}).get("offset_b_minus_a_ms")
                                     for c in by.values()])
    assert set(by) == {(k, "stream") for k in KINDS}
    host_kernel = Path("/proc/sys/kernel/osrelease").read_text().strip()
    for (kind, wl), c in by.items():
        if kind == "ipsec":
            continue   # judged by test_kernel_esp_between_guests
        assert c["status"] == "ok", (kind, wl, c.get("error"))
        tb = c["testbed"]
        assert tb["kind"] == "hosts" and tb["shares_cpus"] is False
        hosts = tb["hosts"]
        assert hosts["a"]["target"] == "root@tb-vm-a" and hosts["a"]["hostname"] == "tb-vm-a"
        assert hosts["b"]["target"] == "root@tb-vm-b" and hosts["b"]["hostname"] == "tb-vm-b"
        # two guest kernels, not this host's (whose kernel has none of these kinds)
        assert hosts["a"]["kernel"] != host_kernel and hosts["b"]["kernel"] != host_kernel
        # the underlay was found from the route to the other site's SSH address
        assert tb["sites"]["a"]["underlay4"] == "198.18.0.1"
        assert tb["sites"]["b"]["underlay4"] == "198.18.0.2"
        cpu = c["cpu"]
        assert cpu["shared_by_sites"] is False and set(cpu["sites"]) == {"a", "b"}
        assert "cpu_busy_a" in c["metrics"] and "cpu_busy_b" in c["metrics"]
        if wl == "stream":
            assert c["metrics"]["throughput"]["value"] > 0
    assert r.returncode == 0, r.stderr[-2000:]
    wg = by[("wireguard", "stream")]
    assert wg["tunnel"]["info"]["impl"] == "kernel"
    assert wg["datapath_counters"]["delta"]["b"]["wg_rx_bytes"] > 100_000
    for kind in ("geneve", "gre"):
        assert by[(kind, "stream")]["datapath_counters"]["delta"]["b"]["rx_bytes"] > 100_000
    assert_guests_clean(pair)


def test_kernel_esp_between_guests(pair: sites.SitePair, campaign) -> None:
    """ipsec impl=kernel (IKEv2 by charon, ESP in each guest's kernel), a stream."""
    r, by, _ = campaign
    cases = [by.get(("ipsec", "stream"))]
    assert all(cases), (sorted(by), r.stderr[-2000:])
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    for c in cases:
        assert c["tunnel"]["info"]["impl"] == "kernel"
        assert c["cpu"]["shared_by_sites"] is False
    stream = by[("ipsec", "stream")]
    # the kernel's SAs on b decrypted what crossed (charon's IKE, ESP in the guest kernel)
    assert stream["datapath_counters"]["delta"]["b"]["sa_in_bytes"] > 100_000, \
        stream["datapath_counters"]["delta"]["b"]
    assert_guests_clean(pair)


def assert_guests_clean(pair: sites.SitePair) -> None:
    """Seen the only way tunbench sees them, over SSH: no case directory, no tunnel link,
    no workload or IKE daemon left on either guest."""
    for name in ("a", "b"):
        with guest(pair, name) as c:
            assert c.run(["find", "/run/tunbench", "-mindepth", "1"], check=False).stdout == ""
            links = [ln.split(":")[1].strip().split("@")[0]
                     for ln in c.run(["ip", "-o", "link"]).stdout.splitlines()]
            # the kernel's own fallback devices (gre0, tunl0, ... made by module loads) stay
            assert {"lo", "eth0", "eth1"} <= set(links), links
            assert not [n for n in links if n.startswith("tb")], links
            for daemon in DAEMONS:
                assert not c.run(["pgrep", "-x", daemon], check=False).ok, \
                    f"{daemon} left running on {name}"
