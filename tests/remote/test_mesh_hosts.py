"""The mesh on hosts over SSH: four sshd "hosts" (sshhosts.py), h1..h4 the sites s1..s4
(`[sites] s1 = "h1", ...`), driven only over SSH. native and vxlan, stream 1 s: all 6 pairs
measured, each case between its pair's two hosts, no site in two measurements at once (from
the recorded start and end: the pairs run one after another), the grid in the HTML report
(its text: not looked at in Chromium here), nothing left on any host.

With `parallel = true` (through the CLI, its progress lines on a pipe): the two pairs of each
of the 3 colours run at the same time (their recorded spans overlap), the next colour only
after both ended, still no site in two overlapping cases, every case recorded with
`parallel` and the pair alongside it, every case's result line printed once, nothing left.
(The four "hosts" share this machine's CPUs: the overlap is what is tested, not the figures.)
And SIGINT to that run once its first case is recorded: the cases running beside each other
end (exit 130, index.json "interrupted", only whole cases recorded, none of a later colour),
nothing is left on any host, and `--resume` completes the mesh with every pair once.

And one host made unreachable: its sshd (started by this test's fixture) is stopped as the
campaign begins, once every host was opened and checked; the cases of its three pairs fail
with its connect error, the other three pairs complete, and after its sshd is started again
`tunbench run --resume` runs exactly those cases, which complete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshhosts import TOOLS, SshHosts, hosts_for
from test_remote_kinds import runs_here
from test_sites import assert_clean

from tunbench import spec
from tunbench.plan import Case
from tunbench.runner import SilentReporter, run_campaign
from tunbench.testbed import topology

pytestmark = [pytest.mark.netns, pytest.mark.correctness]
TB = [sys.executable, "-m", "tunbench"]
SITES = {"s1": "h1", "s2": "h2", "s3": "h3", "s4": "h4"}
PAIRS = [["s1", "s2"], ["s1", "s3"], ["s1", "s4"], ["s2", "s3"], ["s2", "s4"], ["s3", "s4"]]


@pytest.fixture(scope="module")
def hosts4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with hosts_for(Path(tmp_path_factory.mktemp("sshhosts4")) / "h", count=4,
                   tools=(*TOOLS, "iperf3")) as h:
        yield h


def experiment(hosts: SshHosts) -> dict[str, Any]:
    return {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "testbed": {"kind": "mesh"},
            "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), **SITES}}


def docs_of(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))}


def check_every_pair(hosts4: SshHosts, out: Path, parallel: bool = False) -> None:
    """All 12 cases ok, each on its own pair's hosts at their real addresses, every pair once
    per kind, no site in two measurements at once, and the report's grid linking them."""
    docs = list(docs_of(out).values())
    assert len(docs) == 12
    for d in docs:
        assert d["status"] == "ok", (d["case"]["id"], d["error"], d.get("error_log"))
        a, b = d["mesh"]["pair"]
        assert d["case"]["pair"] == [a, b] and d["mesh"]["parallel"] is parallel
        tb = d["testbed"]
        assert tb["kind"] == "hosts" and tb["mesh"]["pair"] == [a, b]
        # the pair's own hosts were sites a and b, at their real addresses
        assert tb["hosts"]["a"]["target"] == SITES[a] and tb["hosts"]["b"]["target"] == SITES[b]
        assert tb["sites"]["a"]["underlay4"] == hosts4.hosts[SITES[a]].addr
        assert tb["sites"]["b"]["underlay4"] == hosts4.hosts[SITES[b]].addr
        assert d["raw"]["iperf3"]["bytes_received"] > 0
    for kind in ("native", "vxlan"):
        got = sorted(d["mesh"]["pair"] for d in docs if d["case"]["tunnel"]["kind"] == kind)
        assert got == PAIRS, kind
    spans = sorted((d["started"], d["ended"], d["mesh"]["pair"]) for d in docs)
    if parallel:   # no site in two cases that overlap in time
        for i, (_s0, e0, p0) in enumerate(spans):
            for s1, _e1, p1 in spans[i + 1:]:
                if s1 < e0:
                    assert not set(p0) & set(p1), (p0, p1)
    else:   # no site in two measurements at once: each case ended before the next started
        for (s0, e0, p0), (s1, e1, p1) in zip(spans, spans[1:], strict=False):
            assert s0 < e0 <= s1 < e1, (p0, p1)
    # the report's grid: a share of native in every pair's cell, each linking its cases
    page = (out / "report" / "index.html").read_text()
    assert "<table class=meshgrid>" in page and "worst pair s" in page
    for d in docs:
        if d["case"]["tunnel"]["kind"] == "vxlan":
            a, b = d["mesh"]["pair"]
            assert f"data-pair='{a}-{b}'" in page
            assert f'href="../cases/{d["case"]["id"]}.json"' in page


def parallel_run(hosts: SshHosts, tmp_path: Path, duration: int = 1) -> list[str]:
    """`tunbench run` of the 4-host mesh with parallel = true (argv; --out tmp_path/r)."""
    f = tmp_path / "mesh.toml"
    f.write_text('[testbed]\nkind = "mesh"\nparallel = true\n')
    sites = [x for n, h in SITES.items() for x in ("--site", f"{n}={h}")]
    return TB + ["run", "--experiment", str(f), *sites, "--ssh-config", str(hosts.ssh_config),
                 "--tunnels", "native,vxlan", "--workloads", "stream", "--duration",
                 str(duration), "--warmup", "0", "--repeats", "1", "--out",
                 str(tmp_path / "r"), "--db", "off"]


def test_the_pairs_of_a_colour_run_at_the_same_time(hosts4: SshHosts,
                                                    tmp_path: Path) -> None:
    runs_here("vxlan")
    out = tmp_path / "r"
    r = subprocess.run(parallel_run(hosts4, tmp_path), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    check_every_pair(hosts4, out, parallel=True)
    docs = list(docs_of(out).values())
    by_colour: dict[int, list[dict[str, Any]]] = {}
    for d in docs:
        by_colour.setdefault(d["mesh"]["colour"], []).append(d)
    assert sorted(by_colour) == [0, 1, 2]
    ends = []
    for _colour, ds in sorted(by_colour.items()):
        pairs = sorted({tuple(d["mesh"]["pair"]) for d in ds})
        assert len(pairs) == 2 and not set(pairs[0]) & set(pairs[1])   # disjoint
        for d in ds:   # each case names the pair that ran alongside it
            other = pairs[1] if tuple(d["mesh"]["pair"]) == pairs[0] else pairs[0]
            assert d["mesh"]["alongside"] == ["-".join(other)], d["mesh"]
        # the two pairs at the same time: each pair's span (native then vxlan) overlaps the
        # other's, and each pair's cases ran in plan order, native first
        span = {}
        for p in pairs:
            mine = sorted((d for d in ds if tuple(d["mesh"]["pair"]) == p),
                          key=lambda d: d["started"])
            assert [d["case"]["tunnel"]["kind"] for d in mine] == ["native", "vxlan"]
            assert mine[0]["ended"] <= mine[1]["started"]
            span[p] = (mine[0]["started"], mine[1]["ended"])
        (s0, e0), (s1, e1) = span.values()
        assert s0 < e1 and s1 < e0, span
        ends.append((min(s0, s1), max(e0, e1)))
    # one colour after another: the next starts when both pairs of this one have ended
    order = sorted(ends)
    for (_, e0), (s1, _) in zip(order, order[1:], strict=False):
        assert e0 <= s1, order
    # and the report says how they ran
    page = (out / "report" / "index.html").read_text()
    assert "The pairs of a colour (no site in two of them) ran at the same time" in page
    assert "Pairs ran one after another" not in page
    # the progress lines: every case's result once, counted 1..12
    done = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert sorted(int(ln[1:ln.index("/")]) for ln in done) == list(range(1, 13)), done
    assert sorted(ln.split()[1].rstrip(":") for ln in done) == sorted(
        d["case"]["id"] for d in docs)
    assert_clean(hosts4)


def test_sigint_ends_the_pairs_running_together_and_resume_completes(
        hosts4: SshHosts, tmp_path: Path) -> None:
    runs_here("vxlan")
    out = tmp_path / "r"
    p = subprocess.Popen(parallel_run(hosts4, tmp_path, duration=3), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, p.kill)
    watchdog.start()
    try:
        seen = []
        assert p.stderr is not None
        for line in p.stderr:   # the first case's result line: its neighbour still runs
            seen.append(line)
            if line.startswith("[1/12] "):
                p.send_signal(signal.SIGINT)
                break
        _, rest = p.communicate(timeout=120)
    finally:
        watchdog.cancel()
    err = "".join(seen) + rest
    assert p.returncode == 130, err
    assert "interrupted by SIGINT" in err and "tunbench run --resume" in err
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "interrupted"
    docs = docs_of(out)
    # whole cases only, all of the first colour (its two pairs' natives, perhaps more)
    assert 1 <= len(docs) < 4, sorted(docs)
    assert all(d["status"] == "ok" and d["mesh"]["colour"] == 0 for d in docs.values())
    recorded = {c["id"] for c in index["cases"] if c["status"] != "pending"}
    assert recorded == set(docs)
    assert_clean(hosts4)
    r = subprocess.run(TB + ["run", "--resume", str(out), "--db", "off"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    check_every_pair(hosts4, out, parallel=True)
    assert_clean(hosts4)


class StopHost(SilentReporter):
    """Stops host `name`'s sshd (and so every session to it, the campaign's agent's too)
    when the campaign begins: after every host was opened and checked, before any case."""

    def __init__(self, hosts: SshHosts, name: str) -> None:
        self.hosts, self.name = hosts, name

    def campaign_start(self, cases: list[Case], plans: list[Any]) -> None:
        self.hosts.hosts[self.name].stop_sshd()


def test_an_unreachable_host_fails_its_pairs_and_resume_runs_them(
        hosts4: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs_here("vxlan")
    # h4's reconnect tries at a test's pace: each is refused at once (its sshd is stopped)
    monkeypatch.setattr(topology, "RECONNECT_PAUSE", 0.2)
    exp = spec.build(experiment(hosts4), "mesh.toml")
    out = tmp_path / "r"
    try:
        outcome = run_campaign(exp, out, StopHost(hosts4, "h4"))
    finally:
        hosts4.hosts["h4"].start_sshd(hosts4.authorized_keys)
    docs = docs_of(out)
    assert len(docs) == 12
    failed = {k for k, d in docs.items() if d["status"] == "failed"}
    assert failed == set(outcome.failed)
    assert {tuple(docs[k]["mesh"]["pair"]) for k in failed} == {
        ("s1", "s4"), ("s2", "s4"), ("s3", "s4")}
    assert len(failed) == 6
    # the first of them may be the one that noticed the lost connection; from then on s4 is
    # down and each of its cases fails at once with the host's connect error
    first, *later = sorted(failed, key=lambda k: docs[k]["case"]["index"])
    assert "h4" in docs[first]["error"], docs[first]["error"]
    for k in later:
        assert docs[k]["error"].startswith("site s4 (h4) is unreachable: "), docs[k]["error"]
        # (at once: the connect error above, not a timeout; its wall time is the host's pace)
        assert docs[k]["ended"] >= docs[k]["started"]
    for k, d in docs.items():
        if k not in failed:
            assert d["status"] == "ok", (k, d["error"])
            assert d["raw"]["iperf3"]["bytes_received"] > 0
    assert json.loads((out / "index.json").read_text())["state"] == "complete"
    kept = {k: (out / "cases" / f"{k}.json").read_bytes() for k in docs if k not in failed}

    r = subprocess.run(TB + ["run", "--resume", str(out), "--db", "off"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    again = docs_of(out)
    for k in kept:
        assert (out / "cases" / f"{k}.json").read_bytes() == kept[k], k
    for k in failed:
        assert again[k]["status"] == "ok", (k, again[k]["error"])
        assert again[k]["raw"]["iperf3"]["bytes_received"] > 0
        assert any(n.startswith("run again by --resume; it had failed: ")
                   and "h4" in n for n in again[k]["notes"]), again[k]["notes"]
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "complete" and {c["status"] for c in index["cases"]} == {"ok"}
    # the whole mesh, once resumed: what a campaign with every host up gives (one test for
    # both saves the remote tier a second 4-host campaign)
    check_every_pair(hosts4, out)
    assert_clean(hosts4)
