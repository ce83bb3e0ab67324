"""Open vSwitch tunnels: the shared machinery behind ovs-vxlan, ovs-geneve, ovs-gre, ovs-stt.

Each site runs its own ovsdb-server and ovs-vswitchd in the foreground (we hold their PIDs),
with every path private to the case workdir (db, db socket, pidfiles, unixctl sockets; OVS_*DIR
point there too), so nothing touches a system OVS or /etc/openvswitch. Logs go to stderr,
which tb.spawn writes to <workdir>/ovs-vswitchd-<site>.log (the runner's log tails).

Layout per site, datapath "netdev" (userspace; OVS native tunnelling):

    veth (underlay) -- port of bridge PHY; the site's underlay addresses move to PHY's
                       internal port (OVS routes and ARPs the outer packets through it);
                       the veth gets NOARP so the kernel never answers for those addresses.
    bridge INNER    -- internal port INNER (inner addresses, mtu_request = tunnel MTU)
                       + tunnel port TUN (type=vxlan|geneve|gre|stt, remote_ip, key).

Datapath "system" (kernel openvswitch module): the kernel routes outer packets itself, so the
underlay is left alone and only INNER + TUN exist.

The thin modules ovs_vxlan.py etc. each define DRIVER = make_driver(<kind>), so the registry
(one DRIVER per module) needs no change.

Port order (netdev datapath; `port_order`, default "fixed"). ovs-vswitchd's main thread
polls the userspace datapath's ports once per main-loop pass, in the order of its port
hash map (dpif_netdev_run: HMAP_FOR_EACH over dp->ports, hashed by datapath port number),
and a datapath numbers ports 0 (ovs-netdev), 1, 2, ... as they are created. When one
ovs-vsctl transaction adds a bridge and a port, ovs-vswitchd creates the two in the hash
order of their names (bridge.c: SHASH_FOR_EACH over the wanted ports), and the names carry
the run id, so which of INNER and the tunnel's datapath port got number 3 changed from one
bring-up to the next. Numbers 0..4 are polled in the order 0, 4, 1, 2, 3: with INNER at 3
the underlay port is polled before INNER in a pass; with INNER at 4, after it. A ping-pong
reply that the local endpoint writes to INNER while ovs-vswitchd is handing it the request
(received on the underlay port) is then found only in the next pass, a whole main-loop
iteration later (about 30 us of this host's CPU per site): TCP RTT p50 about 130 us or
about 195 us per bring-up, stable within a case. Replayed from the link names recorded in
`make run` campaigns mr1-mr9 (bench/bench_ovs_port_order.py), the 24 cases with INNER
predicted at 3 measured 128-183 us and the 25 with INNER at 4 186-248 us (docs/ovs.md,
"Port order and latency"; the same-pass detail is inferred from the order and the extra
CPU per round trip, not yet traced live). "fixed" adds one bridge or port per transaction, so the
numbers are PHY 1, underlay 2, INNER 3, tunnel 4 at every bring-up, and INNER is polled
after the underlay port; "hashed" keeps the old single transactions (for comparisons).
The case records the numbers (tunnel.info.dp_ports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from .. import proc
from ..capabilities import Missing, kernel_missing, tool_missing, tun_device_missing
from ..errors import CommandFailed, SpecError, UnavailableError
from ..testbed import names
from ..testbed.base import Site, Testbed
from . import daemon
from .base import (
    ETH_HEADER,
    IPV4_HEADER,
    IPV6_HEADER,
    UDP_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    Tool,
    TunnelDriver,
    TunnelParams,
    inner_addrs,
)

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
TOOLS = tuple(Tool(t, "openvswitch-switch", "Open vSwitch daemons") for t in (
    "ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl"))
VSCTL_TIMEOUT = 15


@dataclass(frozen=True)
class OvsKind:
    """What differs between the OVS tunnel types."""

    ovs_type: str          # Interface type in OVSDB
    header: int            # encapsulation bytes between outer IP and inner Ethernet
    kernel_option: str     # kernel config the system datapath needs for this vport
    summary: str
    netdev_ok: bool = True
    kernel_module: str = ""  # module behind kernel_option (vport-<type>.ko)


KINDS: dict[str, OvsKind] = {
    # UDP 8 + VXLAN 8
    "vxlan": OvsKind("vxlan", UDP_HEADER + 8, "CONFIG_OPENVSWITCH_VXLAN",
                     "Open vSwitch VXLAN tunnel port (L2 over UDP 4789)",
                     kernel_module="vport_vxlan"),
    # UDP 8 + Geneve base 8 (no options: OVS adds TLVs only when flows set them)
    "geneve": OvsKind("geneve", UDP_HEADER + 8, "CONFIG_OPENVSWITCH_GENEVE",
                      "Open vSwitch Geneve tunnel port (L2 over UDP 6081)",
                     kernel_module="vport_geneve"),
    # GRE base 4 + key 4 (options:key is always set); OVS GRE carries Ethernet (gretap-like)
    "gre": OvsKind("gre", 4 + 4, "CONFIG_OPENVSWITCH_GRE",
                   "Open vSwitch GRE tunnel port (L2 over GRE with key, gretap-like)",
                   kernel_module="vport_gre"),
    # TCP-like header 20 + STT frame header 18 + 2 pad
    "stt": OvsKind("stt", 20 + 18 + 2, "CONFIG_OPENVSWITCH_STT",
                   "Open vSwitch STT tunnel port (L2 over a TCP-like header)",
                   netdev_ok=False, kernel_module="vport_stt"),
}


@dataclass(frozen=True)
class OvsParams(TunnelParams):
    vni: int = field(default=42, metadata={
        "help": "tunnel key (VNI / GRE key) of the tunnel port (1..16777215)"})
    datapath: Literal["auto", "netdev", "system"] = field(default="auto", metadata={
        "help": "netdev (userspace) or system (kernel openvswitch module); auto: system where "
                "the kernel has it, else netdev"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})
    port_order: Literal["fixed", "hashed"] = field(default="fixed", metadata={
        "help": "fixed: bridges and ports added one per ovs-vsctl transaction, so the "
                "datapath port numbers (and the order in which the userspace datapath polls "
                "its ports) are the same at every bring-up; hashed: each bridge with its "
                "port in one transaction, numbered in the hash order of the names (which "
                "carry the run id: the latency of the netdev datapath then changes from one "
                "bring-up to the next, docs/ovs.md)"})

    def validate(self) -> list[str]:
        # GRE keys are 32 bits; VXLAN/Geneve/STT use the low 24 (STT 64) bits: keep one range
        if not 0 < self.vni < 2**24:
            return [f"vni {self.vni} out of range (1..16777215)"]
        return []


def resolve_datapath(params: OvsParams) -> str:
    """'auto' is the kernel datapath where the kernel has it, else the userspace one."""
    if params.datapath != "auto":
        return params.datapath
    return "system" if kernel_missing("CONFIG_OPENVSWITCH", "", "openvswitch") is None \
        else "netdev"


# ---- pure parsers (tested on captured output in tests/data/ovs) ---------------------------
_FLOW_STATS = re.compile(r"(?:^|[ ,])packets:(\d+), bytes:(\d+)")


def parse_dump_flows(text: str) -> list[dict[str, Any]]:
    """`ovs-appctl dpctl/dump-flows` -> [{match, packets, bytes, actions}] per datapath flow."""
    flows = []
    for line in text.splitlines():
        m = _FLOW_STATS.search(line)
        if not m or "actions:" not in line:
            continue
        flows.append({"match": line[:m.start()].strip(" ,"), "packets": int(m.group(1)),
                      "bytes": int(m.group(2)),
                      "actions": line.rsplit("actions:", 1)[1].strip()})
    return flows


_DP_PORT = re.compile(r"^\s*port (\d+): (\S+)(?: \(([^)]*)\))?")
_DP_NUM = re.compile(r"(RX|TX) (packets|bytes):(\d+)")


def parse_dpctl_show(text: str) -> dict[str, dict[str, Any]]:
    """`ovs-appctl dpctl/show -s` -> {port name: {port, type, rx_packets, rx_bytes, ...}}.

    These are the datapath's own per-port counters: cumulative and live (OVSDB's Interface
    statistics are refreshed only every few seconds)."""
    ports: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _DP_PORT.match(line)
        if m:
            cur = {"port": int(m.group(1)), "type": (m.group(3) or "").split(":")[0]}
            ports[m.group(2)] = cur
            continue
        if cur is not None:
            for direction, what, val in _DP_NUM.findall(line):
                cur[f"{direction.lower()}_{what}"] = int(val)
    return ports


def flow_totals(flows: list[dict[str, Any]], action_word: str) -> dict[str, int]:
    """Packets and bytes of the flows whose actions contain `action_word`."""
    sel = [f for f in flows if action_word in f["actions"]]
    return {"packets": sum(f["packets"] for f in sel), "bytes": sum(f["bytes"] for f in sel),
            "flows": len(sel)}


# ---- one site's OVS -------------------------------------------------------------------------
@dataclass
class OvsSite:
    site: Site
    dir: Path
    vswitchd_pid: int = 0

    @property
    def db(self) -> str:
        return f"unix:{self.dir / 'db.sock'}"

    @property
    def ctl(self) -> str:
        return str(self.dir / "ovs-vswitchd.ctl")

    def env(self) -> dict[str, str]:
        d = str(self.dir)
        return {"OVS_RUNDIR": d, "OVS_LOGDIR": d, "OVS_DBDIR": d, "OVS_SYSCONFDIR": d}

    def vsctl(self, *args: str, wait: bool = True, check: bool = True) -> proc.Completed:
        argv = ["ovs-vsctl", f"--db={self.db}", f"--timeout={VSCTL_TIMEOUT}"]
        if not wait:
            argv.append("--no-wait")
        return self.site.run([*argv, *args], env=self.env(), check=check,
                             timeout=VSCTL_TIMEOUT + 5)

    def appctl(self, *args: str, check: bool = True) -> proc.Completed:
        return self.site.run(["ovs-appctl", "-t", self.ctl, "--timeout=10", *args],
                             env=self.env(), check=check, timeout=15)


NETDEV_TAP = "ovs-netdev"
# Constant script: delete the interface named by $1 if it is there.
DEL_IF_PRESENT = 'ip link show "$1" >/dev/null 2>&1 || exit 0; exec ip link del "$1"'


def start_site(tb: Testbed, site: Site, datapath: str) -> OvsSite:
    """Private ovsdb-server + ovs-vswitchd for one site; returns once both answer."""
    d = tb.site_dir(site) / f"ovs-{site.name}"
    site.make_dir(tb.ledger, d)
    o = OvsSite(site, d)
    site.run(["ovsdb-tool", "create", str(d / "conf.db"), str(SCHEMA)], env=o.env(), timeout=20)
    daemon.start(tb, site, ["ovsdb-server", str(d / "conf.db"),
                            f"--remote=punix:{d / 'db.sock'}",
                            f"--pidfile={d / 'ovsdb-server.pid'}",
                            f"--unixctl={d / 'ovsdb-server.ctl'}",
                            "-vconsole:info", "-vsyslog:off"],
                 "ovsdb-server", env=o.env(),
                 ready=lambda: o.vsctl("init", wait=False, check=False).ok)
    if datapath == "netdev" and NETDEV_TAP not in site.links.names():
        # the userspace datapath's own TAP device (not tb-named: OVS names it) stays after
        # ovs-vswitchd exits: removed after the daemon stops, only when this run made it
        site.record_command(tb.ledger, ["sh", "-c", DEL_IF_PRESENT, "tb-del", NETDEV_TAP])
    argv = ["ovs-vswitchd", o.db, f"--pidfile={d / 'ovs-vswitchd.pid'}",
            f"--unixctl={o.ctl}", "-vconsole:info", "-vsyslog:off"]
    if datapath == "netdev":
        argv.append("--disable-system")  # never open or create a kernel datapath
    p = daemon.start(tb, site, argv, "ovs-vswitchd", env=o.env(), timeout=20,
                     ready=lambda: o.appctl("version", check=False).ok)
    o.vswitchd_pid = p.pid
    return o


def move_underlay_addrs(tb: Testbed, site: Site, to_if: str) -> None:
    """Move the site's underlay addresses from the veth to `to_if` (undone in the ledger).
    Never the interface that carries the SSH session to a remote site."""
    if site.underlay_if and site.underlay_if == site.management_if:
        raise SpecError(f"refusing to move the addresses of {site.underlay_if} on "
                        f"{site.host}: it carries the SSH session",
                        "give the site another underlay interface")
    addrs = [(site.underlay4, tb.prefix4), (site.underlay6, tb.prefix6)]
    # undone last: neighbours learnt while OVS answered with its bridge's MAC go stale once
    # the addresses are back on the interface (a host outlives the case, a namespace doesn't)
    site.record_command(tb.ledger, ["ip", "neigh", "flush", "dev", site.underlay_if])
    for cidr in (f"{a}/{plen}" for a, plen in addrs if a):
        site.run(["ip", "addr", "del", cidr, "dev", site.underlay_if], timeout=10)
        site.record_command(tb.ledger, ["ip", "addr", "add", cidr, "dev", site.underlay_if])
        site.links.add_addr(to_if, cidr)
    # the kernel must not answer ARP for the moved addresses on the veth (OVS does it)
    site.run(["ip", "link", "set", "dev", site.underlay_if, "arp", "off"], timeout=10)
    site.record_command(tb.ledger, ["ip", "link", "set", "dev", site.underlay_if, "arp", "on"])


class OvsTunnel(TunnelDriver[OvsParams]):
    """Base of the ovs-* kinds; `tkind` selects the row of KINDS."""

    tkind: ClassVar[str]
    Params = OvsParams
    impl_param = "datapath"
    carries = ("tcp", "udp", "l2")   # an OVS bridge: Ethernet frames
    userspace = ("netdev",)        # the userspace datapath; system: the kernel module
    fingerprint_tools = ("ovs-vswitchd",)

    @classmethod
    def spec(cls) -> OvsKind:
        return KINDS[cls.tkind]

    @classmethod
    def resolve_impl(cls, params: OvsParams) -> str:
        return resolve_datapath(params)

    @classmethod
    def requirements(cls, params: OvsParams) -> list[Missing]:
        missing = [m for m in (tool_missing(t.name, t.why) for t in TOOLS) if m]
        if not missing and not SCHEMA.exists():
            missing.append(Missing(f"file {SCHEMA}", "the OVSDB schema is missing",
                                   "apt-get install --reinstall openvswitch-common"))
        dp = resolve_datapath(params)
        spec = cls.spec()
        if dp == "netdev" and not spec.netdev_ok:
            missing.append(Missing(
                f"{spec.ovs_type.upper()} on the userspace datapath",
                f"OVS accepts type={spec.ovs_type} ports on datapath_type=netdev but the "
                "netdev datapath has no STT implementation and drops every packet",
                "STT needs the kernel datapath with the out-of-tree openvswitch module "
                "(vport-stt); upstream Linux and OVS >= 3.0 have none"))
        if dp == "system":
            for opt, what in (("CONFIG_OPENVSWITCH", "the OVS kernel datapath"),
                              (spec.kernel_option, f"OVS {spec.ovs_type} vports")):
                m = kernel_missing(opt, what, "openvswitch" if opt == "CONFIG_OPENVSWITCH"
                                   else spec.kernel_module)
                if m:
                    missing.append(Missing(m.what, m.why, m.fix + "; or datapath=netdev"))
        if dp == "netdev" and (m := tun_device_missing("the netdev datapath (TAP ports)")):
            missing.append(m)
        return missing

    @classmethod
    def overhead(cls, params: OvsParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return outer + cls.spec().header + ETH_HEADER

    @classmethod
    def moves_underlay(cls, params: OvsParams) -> bool:
        """The userspace datapath takes the underlay port and its addresses."""
        return resolve_datapath(params) == "netdev"

    def up(self, tb: Testbed, params: OvsParams) -> Endpoints:
        missing = self.requirements(params)
        if missing:
            raise UnavailableError(f"{self.kind}: {missing[0].one_line()}",
                                   "see `tunbench list`")
        return self.build(tb, params, resolve_datapath(params))

    def build(self, tb: Testbed, params: OvsParams, dp: str) -> Endpoints:
        """Build without the requirements check (tests use it to prove what a Missing says)."""
        fam = params.underlay
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        a4, b4, a6, b6 = inner_addrs(0)
        phy = names.link_name(tb.run_id, "ph")
        inner = names.link_name(tb.run_id, "ov")
        tun = names.link_name(tb.run_id, "tn")
        sites: dict[str, OvsSite] = {}
        for site, peer, my4, my6 in ((tb.a, tb.b, a4, a6), (tb.b, tb.a, b4, b6)):
            # the bridges' devices (TAP or internal ports) can outlive ovs-vswitchd: deleted
            # after it stops (recorded first), or a remote host would keep them and the
            # underlay addresses moved onto them
            # (netdev only: the system datapath's internal ports cannot be deleted through
            # rtnetlink, EOPNOTSUPP; the kernel datapath removes them with its bridge)
            if dp == "netdev":
                for ifn in (phy, inner):
                    site.record_link(tb.ledger, ifn)
            o = start_site(tb, site, dp)
            sites[site.name] = o
            links = site.links
            phy_port = ["add-port", phy, site.underlay_if]
            tun_port = ["add-port", inner, tun, "--", "set", "interface", tun,
                        f"type={self.spec().ovs_type}",
                        f"options:remote_ip={self.underlay_addr(peer, fam)}",
                        f"options:local_ip={self.underlay_addr(site, fam)}",
                        f"options:key={params.vni}"]
            # fixed: one bridge or port per transaction (each waits until ovs-vswitchd has
            # applied it), so the datapath numbers them in this order: PHY 1, underlay 2,
            # INNER 3, the tunnel's datapath port 4 (module docstring, "Port order")
            together = params.port_order == "hashed"
            if dp == "netdev":
                o.vsctl("add-br", phy, "--", "set", "bridge", phy, "datapath_type=netdev",
                        "--", "set", "interface", phy, f"mtu_request={tb.underlay_mtu}",
                        *(["--", *phy_port] if together else []))
                if not together:
                    o.vsctl(*phy_port)
                move_underlay_addrs(tb, site, phy)
                links.set_link(phy, state="up")
            o.vsctl("add-br", inner, "--", "set", "bridge", inner, f"datapath_type={dp}",
                    "--", "set", "interface", inner, f"mtu_request={mtu}",
                    *(["--", *tun_port] if together else []))
            if not together:
                o.vsctl(*tun_port)
            err = o.vsctl("get", "interface", tun, "error", check=False).stdout.strip()
            if err and err != "[]":
                raise CommandFailed(f"OVS refused the {self.spec().ovs_type} port: {err}",
                                    "see ovs-vswitchd's log in the case's error_log")
            links.add_addr(inner, f"{my4}/24")
            links.add_addr(inner, f"{my6}/64")
            links.set_link(inner, state="up")
        dp_ports = {n: {name: p["port"] for name, p in
                        parse_dpctl_show(o.appctl("dpctl/show").stdout).items()}
                    for n, o in sites.items()}
        return Endpoints(
            a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params, fam),
            a_ifname=inner, b_ifname=inner, rx_ifnames=(inner,),
            datapath_pids={n: [o.vswitchd_pid] for n, o in sites.items()},
            info={"datapath": dp, "ovs_type": self.spec().ovs_type, "vni": params.vni,
                  "underlay": fam, "tunnel_port": tun, "bridge": inner,
                  "phy_bridge": phy if dp == "netdev" else None,
                  "ovs_dirs": {n: str(o.dir) for n, o in sites.items()},
                  "port_order": params.port_order, "dp_ports": dp_ports})

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: the datapath's own port counters (cumulative) of the underlay, tunnel and
        inner ports, and the totals of the datapath flows that encapsulate (tnl_push) and
        decapsulate (tnl_pop) in the userspace datapath (flows may expire: not cumulative)."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            for pid in ep.datapath_pids.get(site.name, []):
                if site.process_gone(tb.ledger, pid):
                    raise CommandFailed(f"ovs-vswitchd of site {site.name} (PID {pid}) is gone: "
                                        "the datapath died during the case",
                                        "its last log lines are in the case's error_log")
            o = OvsSite(site, Path(ep.info["ovs_dirs"][site.name]))
            inner = str(ep.a_ifname if site is tb.a else ep.b_ifname)
            ports = parse_dpctl_show(o.appctl("dpctl/show", "-s").stdout)
            tun_name = next((n for n, p in ports.items() if p["type"] == self.spec().ovs_type),
                            None)
            roles = {"underlay": ports.get(site.underlay_if), "inner": ports.get(inner),
                     "tunnel": ports.get(tun_name) if tun_name else None}
            if ep.info["datapath"] == "system":
                roles = _system_roles(site, roles, tun_name)
            c: dict[str, int] = {}
            for role, port in roles.items():
                for key in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
                    c[f"dp_{role}_{key}"] = int((port or {}).get(key, 0))
            flows = parse_dump_flows(o.appctl("dpctl/dump-flows").stdout)
            for word in ("tnl_push", "tnl_pop"):
                tot = flow_totals(flows, word)
                c[f"flows_{word}_bytes"] = tot["bytes"]
                c[f"flows_{word}_packets"] = tot["packets"]
            out[site.name] = c
        return out


def _system_roles(site: Site, roles: dict[str, Any], tun_name: str | None) -> dict[str, Any]:
    """Kernel datapath: put its counters in the datapath's perspective, as netdev's are.

    Measured in the VM lab (Debian 6.1): dpctl/show reports an internal port with the host
    device's own counters (host tx = datapath rx: swapped relative to the userspace
    datapath), and 0 for the tunnel vport; the vport's device (vxlan_sys_4789, genev_sys_6081,
    gre_sys) counts the frames it encapsulated (tx) and decapsulated (rx)."""
    out = dict(roles)
    inner = roles["inner"]
    if inner:
        out["inner"] = {**inner, "rx_packets": inner.get("tx_packets", 0),
                        "rx_bytes": inner.get("tx_bytes", 0),
                        "tx_packets": inner.get("rx_packets", 0),
                        "tx_bytes": inner.get("rx_bytes", 0)}
    if tun_name:
        out["tunnel"] = site.links.stats(tun_name)
    return out


def ovs_needs(spec: OvsKind) -> dict[str, Needs]:
    """Both datapaths run the daemons; the kernel one also needs the module and its vport."""
    return {"": Needs(tools=TOOLS),
            "netdev": Needs(kernel=(KernelOption("CONFIG_TUN", "tun",
                                                 "netdev internal ports are TAP devices"),)),
            "system": Needs(kernel=(
                KernelOption("CONFIG_OPENVSWITCH", "openvswitch", "the OVS kernel datapath"),
                KernelOption(spec.kernel_option, spec.kernel_module or None,
                             f"OVS {spec.ovs_type} vports")))}


def make_driver(tkind: str) -> type[OvsTunnel]:
    spec = KINDS[tkind]
    return type(f"Ovs{tkind.capitalize()}", (OvsTunnel,),
                {"kind": f"ovs-{tkind}", "tkind": tkind, "summary": spec.summary,
                 "needs": ovs_needs(spec), "__module__": __name__})
