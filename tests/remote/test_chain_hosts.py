"""A chain between two sshd "hosts" (sshhosts.py), driven only over SSH: router ->
firewall(100 rules) -> wan(tbf 20 Mbit/s) -> router, the sites and the functions namespaces on
the hosts (before the WAN on h1, after it on h2), the WAN segment a VXLAN carrier between the
hosts. One campaign carries a 1 s stream and a short RFC 2544 search: TTL = routed hops, the
WAN drops what exceeds its rate and the drop table names it, the hop records name the hosts,
and nothing is left on either host (namespaces, links, nftables tables, /run/tunbench). Then a
namespace journaled by an agent that loses its connection is deleted on that host. Gateways
between the hosts: WireGuard, and SRv6 with a transit End node on h2 (the SRH captured on h2
on both sides of the transit node), against direct in the same run."""

from __future__ import annotations

import base64
import ipaddress
import struct
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts
from test_sites import assert_clean

from kinds_here import lacks
from skb_bounds import min_packets
from tunbench import pcap, proc, spec
from tunbench.chain import srv6
from tunbench.chain.base import addr4, addr6
from tunbench.chain.build import place
from tunbench.chain.spec import ChainSpec
from tunbench.errors import SpecError
from tunbench.plan import Case
from tunbench.progress import SETUP, TEARDOWN, PhaseEvent
from tunbench.remote.agent.client import Agent
from tunbench.remote.transport import Connection
from tunbench.report import hops as report_hops
from tunbench.results.records import CaseRecord
from tunbench.runner import SilentReporter, run_campaign
from tunbench.testbed import names
from tunbench.workloads import loadgen

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

WAN_BPS = 20_000_000
PACKET = 1400            # IP bytes; 1414 at the WAN's tbf (inner Ethernet), in the 1450 MTU
CHAIN = {"path": ["router", "fw", "wan", "router"],
         "fw": {"kind": "firewall", "rules": 100},
         # a 32 KB bucket and a 10 ms queue: a 1 s trial's knee stays within ~2 % of the rate
         "wan": {"kind": "wan", "rate": "20mbit", "burst": "32kb", "queue": "10ms"}}


def _typed(docs: list[dict[str, Any]]) -> list[CaseRecord]:
    """Case documents as the report reads them (results/records.py)."""
    return [CaseRecord.from_doc(d) for d in docs]


def host_state(hosts: SshHosts, name: str) -> dict[str, str]:
    """What a chain could leave on a host, asked over SSH: its namespaces, tunbench links in
    its own namespace, nftables tables of ours."""
    with Connection.open(name, options=hosts.options(), name="check") as c:
        netns = c.run(["ip", "netns", "list"], check=False).stdout
        links = c.run(["ip", "-o", "link"]).stdout
        tables = c.run(["nft", "list", "tables"], check=False).stdout
    return {"netns": netns.strip(),
            "links": "\n".join(ln for ln in links.splitlines() if "vxlan" in ln),
            "nft": "\n".join(ln for ln in tables.splitlines() if "tb_" in ln)}


def experiment(hosts: SshHosts, chain: dict[str, Any], **extra: Any) -> spec.Experiment:
    return spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1,
                                      "mtus": [1500]},
                       "tunnel": [{"kind": "native"}],
                       "workload": [
                           {"name": "stream"},
                           {"name": "loss-search", "method": "rfc2544", "sizes": [str(PACKET)],
                            "flows": 1, "max_rate_pps": 4000, "min_rate_pps": 500,
                            "resolution_pct": 4, "loss_threshold_pct": 0.1,
                            "latency_at_pct": []}],
                       "chain": chain, **extra,
                       "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                      "test")


@pytest.mark.skipif(loadgen.find_binary() is None,
                    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})")
def test_chain_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    empty = {n: host_state(hosts, n) for n in hosts.hosts}
    started = time.monotonic()
    cases = run_campaign(experiment(hosts, CHAIN), tmp_path / "r").store.read_cases()
    took = time.monotonic() - started
    assert [c["status"] for c in cases] == ["ok"] * 2, [(c.get("error"), c.get("error_log"))
                                                        for c in cases]
    by = {c["case"]["workload"]["name"]: c for c in cases}
    for c in cases:
        tb = c["testbed"]
        # the test hosts are namespaces of this machine: one kernel, so one set of CPUs
        assert tb["kind"] == "hosts-chain" and tb["shares_cpus"] is True
        assert tb["shared_machine"]["boot_id"] is True
        # the sites are namespaces on their hosts; the functions before the WAN on h1
        assert tb["sites"]["a"]["host"] == "h1" and tb["sites"]["b"]["host"] == "h2"
        assert tb["sites"]["a"]["netns"].endswith("-a")
        hops = {h["name"]: h for h in tb["chain"]["hops"]}
        assert {n: h["host"] for n, h in hops.items()} == {
            "router1": "h1", "fw": "h1", "wan": "h1", "router4": "h2"}
        carrier = tb["chain"]["carrier"]
        assert carrier["kind"] == "vxlan" and carrier["overhead"] == 50
        assert carrier["ends"]["a"]["local"] == hosts.hosts["h1"].addr
        assert carrier["ends"]["a"]["remote"] == hosts.hosts["h2"].addr
        assert tb["underlay_mtu"] == carrier["mtu"] == 1450
        assert tb["chain"]["segment_mtus"] == [1450] * 5
        probe = c["chain"]["probe"]
        assert probe["routers"] == probe["expected_routers"] == 4, probe   # TTL 60 at b
        assert all(v is not None for v in probe["rtt_us"].values()), probe
    stream = by["stream"]
    # each end sampled by its own agent, both labelled as sharing the CPUs
    assert stream["cpu"]["shared_by_sites"] is True and set(stream["cpu"]["sites"]) == {"a", "b"}
    assert all(e["shared_by_sites"] is True for e in stream["cpu"]["sites"].values())
    mbps = stream["metrics"]["throughput"]["value"]
    assert mbps > 0 and {r["place"]: r for r in stream["chain"]["drops"]}["wan"]["tx_packets"] > 0
    search = by["loss-search"]
    rows = {r["place"]: r for r in search["chain"]["drops"]}
    # the top trials offer ~2x the WAN's rate: tbf drops the excess, and only the WAN does
    assert search["chain"]["bottleneck"] == "wan", search["chain"]["drops"]
    assert rows["wan"]["qdisc_drops"] > 0, rows["wan"]
    assert rows["fw"]["dropped"] == 0 and rows["router4"]["dropped"] == 0
    rate = next(m["value"] for k, m in search["metrics"].items() if k.startswith("rfc2544_pps"))
    assert rate > 0   # how close to the tbf knee: test_searches_converge_to_tbf_rate (locally)
    # the report's chain diagram says where each hop ran
    rows_d = report_hops.diagram(_typed(cases))
    assert rows_d[2][:2] == ("fw", "firewall") and rows_d[2][2].startswith("h1: ")
    assert rows_d[4][2].startswith("h2: ") and "crosses to h2" in rows_d[3][3]
    assert report_hops.diagram_line(_typed(cases)) == "a -> router1 -> fw -> wan ~vxlan~> router4 -> b"
    assert {n: host_state(hosts, n) for n in hosts.hosts} == empty
    assert_clean(hosts)
    print(f"chain between hosts: stream {mbps:.1f} Mbit/s, RFC 2544 {rate:.0f} pps "
          f"(knee {WAN_BPS / 8 / (PACKET + 14):.0f}), WAN drops {rows['wan']['qdisc_drops']}, {took:.1f} s")


def test_chain_between_hosts_refused_in_one_line(hosts: SshHosts, tmp_path: Path) -> None:
    """What a chain between hosts does not support is refused before connecting."""
    with pytest.raises(SpecError) as err:
        experiment(hosts, CHAIN, experiment={"duration": 1, "rate": "100mbit"})
    assert "give the wan a rate instead" in err.value.one_line()
    assert "\n" not in err.value.message
    with pytest.raises(SpecError, match="needs a wan function"):
        experiment(hosts, {"path": ["router"]})
    assert {n: host_state(hosts, n)["netns"] for n in hosts.hosts} == {"h1": "", "h2": ""}


def test_namespace_journaled_on_the_host_goes_with_its_agent(hosts: SshHosts) -> None:
    """A namespace the agent made is deleted by the agent itself when its connection ends
    (as at the end of a crashed run), `tunbench cleanup --site` deletes one whose agent was
    killed outright, and a name that is not tunbench's is refused."""
    ns = names.netns_name(names.new_run_id(), "fw")
    with Connection.open("h2", options=hosts.options(), name="ns") as conn:
        agent = Agent.start(conn, netlink=False)
        with pytest.raises(Exception, match="not a tunbench name"):
            agent.call("netns_add", name="other")
        agent.call("netns_add", name=ns)
        assert ns in conn.run(["ip", "netns", "list"]).stdout
        agent.close()    # EOF: the agent undoes its journal
        assert ns not in conn.run(["ip", "netns", "list"]).stdout
        # an agent killed outright leaves its journal: `tunbench cleanup --site` deletes it
        crashed = Agent.start(conn, netlink=False)
        crashed.call("netns_add", name=ns)
        conn.run(["kill", "-9", str(crashed.hello["pid"])])
        crashed.close()
        assert ns in conn.run(["ip", "netns", "list"]).stdout
    r = proc.run([sys.executable, "-m", "tunbench", "cleanup", "--site", "h2", "--ssh-config",
                  str(hosts.ssh_config)], check=False, timeout=60)
    assert r.returncode == 0 and f"netns {ns}" in r.stdout, (r.stdout, r.stderr)
    assert host_state(hosts, "h2")["netns"] == ""


@pytest.mark.parametrize("where", ["build", "measuring"])
def test_a_failing_case_leaves_nothing_on_either_host(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The failure path: a step fails (injected) after every namespace, veth and the
    carrier exist on both hosts: mid-build (after the real routes of site b's namespace), or
    once the testbed is up, as the per-hop probe starts (the sites' agents, the functions'
    rules all there); the case is failed with that reason and the ledger removes everything
    on both hosts."""
    from tunbench.chain import hops as chain_hops
    from tunbench.chain import hosts as chain_hosts
    from tunbench.errors import CommandFailed
    real = chain_hosts._routes

    def failing(agent: Agent, ns: str, pos: int, n: int) -> None:
        real(agent, ns, pos, n)
        if pos == n + 1:
            raise CommandFailed(f"injected failure after the routes of {ns}")

    def failing_probe(tb: Any) -> dict[str, Any]:
        raise CommandFailed("injected failure after the routes of the whole testbed")

    if where == "build":
        monkeypatch.setattr(chain_hosts, "_routes", failing)
    else:
        monkeypatch.setattr(chain_hops, "probe", failing_probe)
    empty = {n: host_state(hosts, n) for n in hosts.hosts}
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                      "tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}],
                      "chain": CHAIN,
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    (c,) = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert c["status"] == "failed" and "injected failure after the routes" in c["error"]
    assert "removed during the case" not in c["error"]
    assert not any(n.startswith("teardown") for n in c["notes"]), c["notes"]
    assert {n: host_state(hosts, n) for n in hosts.hosts} == empty
    assert_clean(hosts)


def test_wireguard_gateways_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """router -> gwa -> wan -> gwb -> router with WireGuard terminated at the gateways, gwa on
    h1 and gwb on h2 (each an agent in its namespace there): the sites' traffic crosses the
    WAN inside the tunnel (the WAN forwards outer packets only: 4 routed hops), the inner
    path gets the tunnel's MTU, and the daemons end with the case."""
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1, "mtus": [1500]},
                      "tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}],
                      "chain": {"path": ["router", "gwa", "wan", "gwb", "router"],
                                "gwa": {"kind": "gateway", "tunnel": "wireguard"},
                                "gwb": {"kind": "gateway", "tunnel": "wireguard"},
                                "wan": {"kind": "wan", "rate": "50mbit"}},
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    (c,) = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert c["status"] == "ok", (c.get("error"), c.get("error_log"))
    tbc = c["testbed"]["chain"]
    gt = tbc["gateway_tunnel"]
    assert gt["kind"] == "wireguard" and gt["encrypts"] and gt["gateways"] == ["gwa", "gwb"]
    assert {h["name"]: h["host"] for h in tbc["hops"]} == {
        "router1": "h1", "gwa": "h1", "wan": "h1", "gwb": "h2", "router5": "h2"}
    assert report_hops.diagram_line(_typed([c])) == (f"a -> router1 -> gwa ={gt['label']}=> wan "
                                              f"={gt['label']} over vxlan=> gwb -> router5 -> b")
    inner = gt["inner_mtu"]
    assert tbc["segment_mtus"] == [inner, inner, 1450, 1450, inner, inner] and inner < 1450
    assert c["chain"]["probe"]["routers"] == c["chain"]["probe"]["expected_routers"] == 4
    assert c["metrics"]["throughput"]["value"] > 0
    rows = {r["place"]: r for r in c["chain"]["drops"]}
    # it all crossed the WAN: at least its bytes in skbs of at most 64 KiB (GSO/GRO)
    assert rows["wan"]["tx_packets"] >= min_packets(c["raw"]["iperf3"]["bytes_received"])
    for pids in gt["endpoints"]["datapath_pids"].values():    # wireguard-go (or none: kernel)
        for pid in pids:
            comm = Path(f"/proc/{pid}/comm")
            assert not comm.exists() or "wireguard" not in comm.read_text(), pid
    assert_clean(hosts)


def test_vxlan_at_the_sites_through_a_chain_between_hosts_against_direct(
        hosts: SshHosts, tmp_path: Path) -> None:
    """A tunnel at the sites runs over the chain (its underlay) as locally: vxlan inside the
    sites' namespaces, through the carrier's vxlan between the hosts. `direct = true`: the
    case also runs on the plain hosts testbed (the hosts' own stacks, no function), in the
    same run; the report sets the chain against it."""
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1, "mtus": [1500]},
                      "tunnel": [{"kind": "vxlan"}], "workload": [{"name": "stream"}],
                      "chain": {"path": ["wan"], "wan": {"kind": "wan", "rate": "50mbit"},
                                "direct": True},
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 2, \
        [(c.get("error"), c.get("error_log")) for c in cases]
    by = {c["testbed"]["kind"]: c for c in cases}
    assert set(by) == {"hosts", "hosts-chain"}
    c = by["hosts-chain"]
    assert c["testbed"]["underlay_mtu"] == 1450 and c["case"]["tunnel"]["kind"] == "vxlan"
    assert [h["host"] for h in c["testbed"]["chain"]["hops"]] == ["h1"]
    assert c["chain"]["probe"]["routers"] == 1
    assert c["chain"]["drops"][1]["tx_packets"] > 100          # it crossed the wan hop
    assert by["hosts"]["testbed"]["sites"]["a"]["netns"] is None       # the host itself
    chain_mbps = c["metrics"]["throughput"]["value"]
    direct_mbps = by["hosts"]["metrics"]["throughput"]["value"]
    assert chain_mbps > 0 and direct_mbps > 0
    cmp = report_hops.chain_vs_direct(_typed(cases))
    assert cmp and cmp[0]["metric"] == "throughput", cmp
    assert cmp[0]["pct"] == pytest.approx(100 * chain_mbps / direct_mbps, rel=1e-9), cmp
    assert_clean(hosts)


SRV6_CHAIN: dict[str, Any] = {
    "path": ["gwa", "wan", "transit", "gwb"],   # gwa, wan on h1; transit, gwb on h2
    "gwa": {"kind": "gateway", "tunnel": "srv6"},
    "wan": {"kind": "wan"},
    "transit": {"kind": "router", "srv6_end": True},
    "gwb": {"kind": "gateway", "tunnel": "srv6"},
    "direct": True}


class TransitCapture(SilentReporter):
    """A capture on the transit node's host, over SSH: while the chain's ping case runs (from
    the ping through the path to teardown), tcpdump in the transit's namespace on h2 on both
    of its links (left: the carrier's end from h1; right: the veth to gwb). The namespace and
    link names follow from the run id (the one `tb-<run>-transit` on h2) and chain.build.place;
    the pcaps are read back over SSH and removed from the host."""

    def __init__(self, hosts: SshHosts, chain: ChainSpec) -> None:
        self.conn = Connection.open("h2", options=hosts.options(), name="capture")
        self.chain = chain
        self.on = False
        self.procs: dict[str, tuple[Any, str]] = {}
        self.raw: dict[str, bytes] = {}
        self.run_id = ""

    def case_start(self, case: Case) -> None:
        self.on = case.through_chain and case.workload.name == "ping"

    def phase(self, event: PhaseEvent) -> None:
        if self.on and event.name == SETUP and event.detail.startswith("ping through") \
                and not self.procs:
            self._start()
        elif self.on and event.name == TEARDOWN and self.procs:
            self._stop()

    def _start(self) -> None:
        listed = self.conn.run(["ip", "netns", "list"]).stdout.split()
        (ns,) = [n for n in listed if names.is_ours_netns(n) and n.endswith("-transit")]
        self.run_id = ns.split("-")[1]
        transit = {h.name: h for h in place(self.run_id, self.chain)}["transit"]
        for side, ifname in (("left", transit.left_if), ("right", transit.right_if)):
            path = f"/tmp/tb{self.run_id}-cap-{side}.pcap"
            p = self.conn.spawn(["ip", "netns", "exec", ns, "tcpdump", "-i", ifname, "-n", "-U",
                                 "--immediate-mode", "-Z", "root", "-s", "160", "-w", path],
                                f"{path}.log")
            self.procs[side] = (p, path)
        deadline = time.monotonic() + 15
        for _, path in self.procs.values():
            while "listening on" not in self.conn.run(["cat", f"{path}.log"],
                                                      check=False).stdout:
                assert time.monotonic() < deadline, f"tcpdump did not start ({path})"
                time.sleep(0.1)

    def _read(self, path: str) -> bytes:
        return base64.b64decode(self.conn.run(["base64", "-w0", path]).stdout)

    def _srh_by_segments(self, path: str) -> Counter[tuple[str, ...]]:
        """SRv6 packets through the transit End SID so far, by segment list (a record
        tcpdump is writing right now counts at the next look)."""
        end = srv6.sid(3, "e")
        try:
            return Counter(s.segments for s in pcap.parse_srh_pcap(self._read(path))
                           if s.segments[:1] == (end,))
        except (ValueError, IndexError, struct.error):
            return Counter()

    def _stop(self) -> None:
        # every packet the transit node forwarded crossed both links; the traffic is over at
        # teardown, so once both tcpdumps have read theirs the two sides agree (a starved
        # tcpdump reads late, and stopping it drops what it has not read): up to 10 s
        deadline = time.monotonic() + 10
        paths = [path for _, path in self.procs.values()]
        while time.monotonic() < deadline:
            left, right = (self._srh_by_segments(path) for path in paths)
            if left and left == right:
                break
            time.sleep(0.2)
        time.sleep(0.2)   # the last replies reach the capture
        for side, (p, path) in self.procs.items():
            p.stop()
            self.raw[side] = self._read(path)
            self.conn.run(["rm", "-f", path, f"{path}.log"])
        self.procs = {}

    def close(self) -> None:
        for p, path in self.procs.values():   # a case that failed before its teardown
            p.stop()
            self.conn.run(["rm", "-f", path, f"{path}.log"], check=False)
        self.conn.close()


@pytest.mark.skipif(lacks("srv6") is not None, reason=f"no SRv6 here: {lacks('srv6')}")
def test_srv6_gateways_and_a_transit_node_between_hosts(hosts: SshHosts,
                                                        tmp_path: Path) -> None:
    """Seed 004's SRv6 deployment across two hosts: a -> gwa (seg6 encap, SRH) -> wan (h1)
    ~carrier~> transit (seg6local End, h2) -> gwb (End.DX4, h2) -> b, and direct (the hosts'
    own path) in the same run: a 1 s stream and 1 s of pings each. A capture on h2, on both
    sides of the transit node, sees the SRH listing the transit's End SID then gwb's End.DX4
    SID: before the transit node the outer destination is its SID with one segment left,
    after it gwb's with none and the outer hop limit one lower (it is a hop of the SRv6
    path); the replies the same way back to gwa's End.DX4; the sites' addresses never cross
    it in the clear. The inner TTL counts the gateway pair once (1 hop; direct 0), the SIDs'
    own counters saw the traffic, and nothing is left on either host."""
    empty = {n: host_state(hosts, n) for n in hosts.hosts}
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1, "mtus": [1500]},
                      "tunnel": [{"kind": "native"}],
                      "workload": [{"name": "stream"}, {"name": "ping", "interval": 0.2}],
                      "chain": SRV6_CHAIN,
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    assert exp.chain is not None
    cap = TransitCapture(hosts, exp.chain)
    started = time.monotonic()
    try:
        cases = run_campaign(exp, tmp_path / "r", reporter=cap).store.read_cases()
    finally:
        cap.close()
    took = time.monotonic() - started
    assert [c["status"] for c in cases] == ["ok"] * 4, [(c.get("error"), c.get("error_log"))
                                                        for c in cases]
    by = {(c["case"]["topology"], c["case"]["workload"]["name"]): c for c in cases}
    for w in ("stream", "ping"):
        ch = by["chain", w]
        assert by["direct", w]["testbed"]["kind"] == "hosts" and "chain" not in by["direct", w]
        tbc = ch["testbed"]["chain"]
        assert ch["testbed"]["kind"] == "hosts-chain"
        assert {h["name"]: h["host"] for h in tbc["hops"]} == {
            "gwa": "h1", "wan": "h1", "transit": "h2", "gwb": "h2"}
        gt = tbc["gateway_tunnel"]
        assert gt["kind"] == "srv6" and gt["gateways"] == ["gwa", "gwb"]
        assert gt["transit"] == ["transit"]
        assert gt["srv6"]["segments_to_b4"] == [srv6.sid(3, "e"), srv6.sid(4, "d4")]
        # the SRH (40 + 8 + 2 x 16) off the carrier's 1450 on the sites' sides
        assert gt["inner_mtu"] == 1450 - 40 - 8 - 2 * 16 == ch["testbed"]["underlay_mtu"]
        assert tbc["segment_mtus"] == [1370, 1450, 1450, 1450, 1370]
        assert ch["chain"]["probe"]["routers"] == ch["chain"]["probe"]["expected_routers"] == 1
        delta = ch["chain"]["counters"]["delta"]
        assert delta["transit"]["function"]["srv6_end_packets"] > 0, delta["transit"]
        assert delta["gwb"]["function"]["srv6_end_dx4_packets"] > 0, delta["gwb"]
        assert delta["gwa"]["function"]["srv6_end_dx4_packets"] > 0, delta["gwa"]
    assert report_hops.diagram_line(_typed([by["chain", "stream"]])) == \
        "a -> gwa =srv6=> wan =srv6 over vxlan=> transit =srv6=> gwb -> b"
    # seed 004's three metrics, direct and through the gateways: throughput, RTT, hops
    for topo in ("direct", "chain"):
        assert by[topo, "stream"]["metrics"]["throughput"]["value"] > 0
        assert by[topo, "ping"]["metrics"]["rtt_avg"]["value"] > 0
    assert by["direct", "ping"]["metrics"]["hops"]["value"] == 0
    assert by["chain", "ping"]["metrics"]["hops"]["value"] == 1
    cmp = {(r["workload"], r["metric"]): r for r in report_hops.chain_vs_direct(_typed(cases))}
    assert (cmp["ping", "hops"]["direct"], cmp["ping", "hops"]["chain"]) == (0, 1)
    assert cmp["stream", "throughput"]["pct"] == pytest.approx(
        100 * by["chain", "stream"]["metrics"]["throughput"]["value"]
        / by["direct", "stream"]["metrics"]["throughput"]["value"], rel=1e-9)
    # on the wire at the transit node (h2)
    assert by["chain", "ping"]["case"]["run_id"] == cap.run_id
    hop = {h.name: h for h in place(cap.run_id, exp.chain)}
    end, to_b, to_a = srv6.sid(3, "e"), srv6.sid(4, "d4"), srv6.sid(1, "d4")
    left, right = (pcap.parse_srh_pcap(cap.raw[s]) for s in ("left", "right"))
    before = [s for s in left if s.segments == (end, to_b)]
    after = [s for s in right if s.segments == (end, to_b)]
    # the probe's 20 pings to site b and the ping workload's 5, at least
    assert len(before) == len(after) >= 25, (len(before), len(after))
    assert {(s.src, s.dst, s.segments_left, s.inner) for s in before} == \
        {(hop["gwa"].right6, end, 1, 4)}
    assert {(s.src, s.dst, s.segments_left, s.inner) for s in after} == \
        {(hop["gwa"].right6, to_b, 0, 4)}
    assert [s.hop_limit - 1 for s in before] == [s.hop_limit for s in after]
    back_r = [s for s in right if s.segments == (end, to_a)]
    back_l = [s for s in left if s.segments == (end, to_a)]
    assert len(back_r) == len(back_l) >= 25, (len(back_r), len(back_l))
    assert {(s.src, s.dst, s.segments_left) for s in back_r} == {(hop["gwb"].left6, end, 1)}
    assert {(s.src, s.dst, s.segments_left) for s in back_l} == {(hop["gwb"].left6, to_a, 0)}
    assert [s.hop_limit - 1 for s in back_r] == [s.hop_limit for s in back_l]
    # the outer hop limit counts every node of the SRv6 path (64 at encapsulation, as the local
    # capture in tests/data/chain shows): towards b gwa and the wan on h1 before the transit
    # node, then the transit node; back, gwb (63: site b's replies, which it forwards; 64:
    # its own replies to the per-hop probe's pings, which it sends), then the transit node
    assert ({s.hop_limit for s in before}, {s.hop_limit for s in after}) == ({62}, {61})
    assert ({s.hop_limit for s in back_r}, {s.hop_limit for s in back_l}) == ({63, 64},
                                                                              {62, 63})
    # the sites' packets to each other never cross it in the clear (the per-hop probe's
    # pings from site a to the transit's own address do: plain routing, not the SRv6 path)
    sites = ({addr4(0, 1), addr4(4, 2)},
             {str(ipaddress.ip_address(addr6(0, 1))), str(ipaddress.ip_address(addr6(4, 2)))})
    for side in ("left", "right"):
        seen = pcap.parse_pcap(cap.raw[side])
        assert [p for p in seen if {p.src, p.dst} in sites] == []
    assert {n: host_state(hosts, n) for n in hosts.hosts} == empty
    assert_clean(hosts)
    mbps = {t: by[t, "stream"]["metrics"]["throughput"]["value"] for t in ("direct", "chain")}
    rtt = {t: by[t, "ping"]["metrics"]["rtt_avg"]["value"] for t in ("direct", "chain")}
    print(f"srv6 gateways between hosts: stream {mbps['chain']:.0f} Mbit/s vs "
          f"{mbps['direct']:.0f} direct, RTT {rtt['chain']:.0f} vs {rtt['direct']:.0f} µs, "
          f"hops 1 vs 0; SRH at the transit: {len(before)} to b (hop limit 62->61), "
          f"{len(back_r)} back (63->62, gwb's own 64->63); {took:.1f} s")
