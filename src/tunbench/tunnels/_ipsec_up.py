"""Bringing up the ipsec kind: libipsec (charon per site and tunnel), kernel (one charon per
site, IKEv2, xfrm interfaces) and xfrm (static keys). See tunnels/ipsec.py."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CommandFailed
from ..testbed import names
from ..testbed.base import Site, Testbed
from . import _spread, _xfrm
from . import _strongswan as ss
from ._esp import esp_overhead_at
from .base import Endpoints
from .base import inner_addrs as _inner_addrs

if TYPE_CHECKING:
    from .ipsec import Ipsec, IpsecParams

IDS = {"a": "site-a.tunbench", "b": "site-b.tunbench"}


def _ts(i: int, site: Site, n: int, which: str) -> list[str]:
    """Traffic selectors of tunnel i: the inner host addresses (+ service addresses)."""
    a4, b4, a6, b6 = _inner_addrs(i)
    me = site.name if which == "local" else ("b" if site.name == "a" else "a")
    v4, v6 = (a4, a6) if me == "a" else (b4, b6)
    ts = [f"{v4}/32", f"{v6}/128"]
    if n > 1:
        j = 0 if me == "a" else 1
        ts += [f"{_spread.SERVICE4[j]}/32", f"{_spread.SERVICE6[j]}/128"]
    return ts




def _children(tb: Testbed, drv: Ipsec, p: IpsecParams, i: int, port: int,
              if_id: int, ts_any: bool, reqid: int = 0) -> dict[str, ss.ChildConf]:
    """Tunnel i's swanctl configuration in each site, with a fresh PSK (0600 include)."""
    psk = new_psk()
    out = {}
    for site in tb.sites():
        peer = tb.other(site)
        psk_file = tb.write_secret(f"psk{i}-{site.name}.conf",
                                   ss.psk_section(f"tb{i}", (IDS["a"], IDS["b"]), psk), site)
        if p.mode == "transport":
            local_ts, remote_ts = ["dynamic"], ["dynamic"]
        elif ts_any:
            local_ts = remote_ts = ["0.0.0.0/0", "::/0"]
        else:
            local_ts, remote_ts = _ts(i, site, p.tunnels, "local"), _ts(i, site, p.tunnels,
                                                                        "remote")
        out[site.name] = ss.ChildConf(
            name=f"tb{i}", local_addr=drv.underlay_addr(site, p.underlay),
            remote_addr=drv.underlay_addr(peer, p.underlay), port=port,
            local_id=IDS[site.name], remote_id=IDS[peer.name], local_ts=local_ts,
            remote_ts=remote_ts, mode=p.mode, encap=p.use_encap, cipher=p.cipher,
            if_id=if_id, psk_file=str(psk_file), reqid=reqid)
    del psk
    return out


def _start(tb: Testbed, site: Site, impl: str, tag: str, port: int, natt: int, index: int = 0
           ) -> tuple[int, Path, Path]:
    vici = tb.site_dir(site) / f"vici{tag}{site.name}.sock"
    conf = tb.write_text(site, f"strongswan{tag}-{site.name}.conf",
                  ss.strongswan_conf(ss.CharonConf(impl, vici, port=port, port_nat_t=natt,
                                                   routing_table=220 + index,
                                                   routing_table_prio=32800 + index)))
    p = ss.start_charon(tb, site, f"charon{tag}", conf, vici)
    return p.pid, conf, vici


def _load_and_initiate(tb: Testbed, charons: dict[str, tuple[Path, Path]],
                       confs: dict[str, list[ss.ChildConf]], tag: str) -> None:
    for site in tb.sites():
        conf, vici = charons[site.name]
        sw = tb.write_text(site, f"swanctl{tag}-{site.name}.conf",
                           ss.swanctl_conf(confs[site.name]))
        ss.swanctl(site, vici, conf, ["--load-all", "--noprompt", "--file", str(sw)])
    conf, vici = charons[tb.a.name]
    for ch in confs[tb.a.name]:
        ss.swanctl(tb.a, vici, conf, ["--initiate", "--child", ch.name, "--timeout", "20"],
                   timeout=30)
    for site in tb.sites():
        conf, vici = charons[site.name]
        sas = ss.parse_list_sas(ss.swanctl(site, vici, conf, ["--list-sas"]).stdout)
        for ch in confs[site.name]:
            if sas.get(ch.name, {}).get("state") != "INSTALLED":
                raise CommandFailed(f"IPsec SA {ch.name} not installed in site {site.name} "
                                    "after IKE", "see the case's error_log (charon log)")


def _inner(site: Site, ifname: str, i: int, mtu: int) -> None:
    a4, b4, a6, b6 = _inner_addrs(i)
    me4, me6 = (a4, a6) if site.name == "a" else (b4, b6)
    # `ip`, not site.links: charon's TUN is named by charon (ipsec0), not tb-prefixed, and a
    # remote site's agent sets netlink attributes only on links of ours
    site.run(["ip", "link", "set", "dev", ifname, "mtu", str(mtu)], timeout=10)
    site.run(["ip", "addr", "add", f"{me4}/24", "dev", ifname], timeout=10)
    site.run(["ip", "-6", "addr", "add", f"{me6}/64", "dev", ifname, "nodad"], timeout=10)
    site.run(["ip", "link", "set", "dev", ifname, "up"], timeout=10)


def up(drv: Ipsec, tb: Testbed, p: IpsecParams, impl: str) -> Endpoints:
    mtu = drv.tunnel_mtu(p, tb.underlay_mtu)
    devices: dict[str, list[str]] = {"a": [], "b": []}
    pids: dict[str, list[int]] = {"a": [], "b": []}
    charons: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}
    hops: dict[str, list[_spread.Hop]] = {"a": [], "b": []}
    if p.mode == "transport":
        return _up_transport(drv, tb, p, impl, pids, charons)
    if p.tunnels > 1:
        _spread.add_service_addrs(tb)
    if impl == "libipsec":
        for i in range(p.tunnels):
            run: dict[str, tuple[Path, Path]] = {}
            for site in tb.sites():
                before = set(site.links.names())
                pid, conf, vici = _start(tb, site, "libipsec", str(i), 500 + i, 4500 + i, i)
                pids[site.name].append(pid)
                charons[site.name].append((str(conf), str(vici)))
                run[site.name] = (conf, vici)
                # charon's TUN (not persistent) goes when charon, which the ledger stops,
                # closes it
                dev = wait_device(site, before, "ipsec")
                devices[site.name].append(dev)
                _inner(site, dev, i, mtu)
            # gateways (tb.behind) carry whole segments: selectors for any address (one
            # policy; per-prefix ones make kernel-libipsec install one route per pair of
            # prefixes, and it fails on the second with the same destination)
            confs = _children(tb, drv, p, i, 4500 + i, 0, ts_any=bool(tb.behind))
            _load_and_initiate(tb, run, {k: [v] for k, v in confs.items()}, str(i))
    else:
        if impl == "kernel":
            run = {}
            for site in tb.sites():
                _register_charon(drv, tb, site, p)
                pid, conf, vici = _start(tb, site, "kernel", "", 500, 4500)
                pids[site.name].append(pid)
                charons[site.name].append((str(conf), str(vici)))
                run[site.name] = (conf, vici)
        per_site: dict[str, list[ss.ChildConf]] = {"a": [], "b": []}
        for i in range(p.tunnels):
            for site in tb.sites():
                dev = link_name(tb, f"x{i}{site.name}")
                _xfrm.add_xfrm_interface(tb, site, dev, _xfrm.tb_id(i + 1))
                devices[site.name].append(dev)
                _inner(site, dev, i, mtu)
            if impl == "kernel":
                port = 4500 if p.use_encap else 500
                for k, v in _children(tb, drv, p, i, port, _xfrm.tb_id(i + 1), ts_any=True,
                                      reqid=_xfrm.tb_id(i + 1)).items():
                    per_site[k].append(v)
            else:
                _static(drv, tb, p, i, _xfrm.tb_id(i + 1))
        if impl == "kernel":
            _load_and_initiate(tb, run, per_site, "")
    a6: str | None  # the inner IPv6 of the service addresses may be absent (tunnels=N)
    b6: str | None
    for i in range(p.tunnels):
        a4, b4, a6, b6 = _inner_addrs(i)
        hops["a"].append(_spread.Hop(devices["a"][i], b4, b6))
        hops["b"].append(_spread.Hop(devices["b"][i], a4, a6))
    if p.tunnels > 1:
        a4, b4, a6, b6 = _spread.add_routes(tb, hops)
    else:
        a4, b4, a6, b6 = _inner_addrs(0)
    return Endpoints(
        a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu,
        overhead=esp_overhead_at(p, p.underlay, tb.underlay_mtu),
        a_ifname=devices["a"][0], b_ifname=devices["b"][0], rx_ifnames=tuple(devices["b"]),
        datapath_pids={k: v for k, v in pids.items() if v and impl == "libipsec"},
        info=_info(p, impl, devices, charons))


def _info(p: IpsecParams, impl: str, devices: dict[str, list[str]],
          charons: dict[str, list[tuple[str, str]]]) -> dict[str, object]:
    esp, ike = ss.PROPOSALS[p.cipher]
    n = p.tunnels if p.mode == "tunnel" else 1
    reqids = ([r for i in range(n) for r in _xfrm.static_reqids(i)] if impl == "xfrm" else
              [_xfrm.tb_id(i + 1) for i in range(n)] if impl == "kernel" else [])
    return {"impl": impl, "mode": p.mode, "encap": p.use_encap, "reqids": reqids,
            "udp_port": (4500 if p.use_encap else None), "cipher": p.cipher,
            "esp_proposal": esp, "ike_proposal": ike if impl != "xfrm" else None,
            "underlay": p.underlay, "devices": devices, "charons": charons,
            **_spread.describe(p.tunnels)}


def _register_charon(drv: Ipsec, tb: Testbed, site: Site, p: IpsecParams) -> None:
    """Undo exactly what charon's kernel-netlink plugin may leave (it removes its SAs and
    policies when it stops; these run after it, for a charon that was killed): the SAs of our
    fixed reqids, the policies of our if_ids (transport: of the two underlay addresses)."""
    local = drv.underlay_addr(site, p.underlay)
    remote = drv.underlay_addr(tb.other(site), p.underlay)
    n = p.tunnels if p.mode == "tunnel" else 1
    ids = [_xfrm.tb_id(i + 1) for i in range(n)]
    pols = [pol for j in ids for pol in _xfrm.charon_policies(
        p.mode, local, remote, j if p.mode == "tunnel" else 0)]
    _xfrm.register_undo(tb, site, reqids=ids, policies=pols)


def _static(drv: Ipsec, tb: Testbed, p: IpsecParams, i: int, if_id: int) -> None:
    a, b = tb.a, tb.b
    ua, ub = drv.underlay_addr(a, p.underlay), drv.underlay_addr(b, p.underlay)
    r_ab, r_ba = _xfrm.static_reqids(i)
    ab, ba = _xfrm.new_sa(ua, ub, p.cipher, r_ab), _xfrm.new_sa(ub, ua, p.cipher, r_ba)
    for site, out_sa in ((a, ab), (b, ba)):     # before anything is added
        _xfrm.register_undo(tb, site, sas=(ab, ba),
                            policies=_xfrm.static_policies(out_sa, p.mode, if_id))
    states = [_xfrm.state_line(sa, p.cipher, p.mode, if_id) for sa in (ab, ba)]
    _xfrm.install_static(tb, a, f"xfrm{i}", states + _xfrm.policy_lines(ab, ba, p.mode, if_id))
    _xfrm.install_static(tb, b, f"xfrm{i}", states + _xfrm.policy_lines(ba, ab, p.mode, if_id))


def _up_transport(drv: Ipsec, tb: Testbed, p: IpsecParams, impl: str,
                  pids: dict[str, list[int]], charons: dict[str, list[tuple[str, str]]]
                  ) -> Endpoints:
    """Transport mode (kernel only): ESP protects the underlay addresses themselves."""
    mtu = drv.tunnel_mtu(p, tb.underlay_mtu)
    for site in tb.sites():      # before any change: no if_id tells their policies from ours
        _xfrm.check_transport_free(site, drv.underlay_addr(site, p.underlay),
                                   drv.underlay_addr(tb.other(site), p.underlay))
    if impl == "kernel":
        run = {}
        for site in tb.sites():
            _register_charon(drv, tb, site, p)
            pid, conf, vici = _start(tb, site, "kernel", "", 500, 4500)
            pids[site.name].append(pid)
            charons[site.name].append((str(conf), str(vici)))
            run[site.name] = (conf, vici)
        confs = _children(tb, drv, p, 0, 4500 if p.use_encap else 500, 0, ts_any=False,
                          reqid=_xfrm.tb_id(1))
        _load_and_initiate(tb, run, {k: [v] for k, v in confs.items()}, "")
    else:
        _static(drv, tb, p, 0, 0)
    fam = p.underlay
    a_addr, b_addr = drv.underlay_addr(tb.a, fam), drv.underlay_addr(tb.b, fam)
    return Endpoints(
        a4=a_addr if fam == 4 else tb.a.underlay4, b4=b_addr if fam == 4 else tb.b.underlay4,
        a6=tb.a.underlay6, b6=tb.b.underlay6, mtu=mtu,
        overhead=esp_overhead_at(p, p.underlay, tb.underlay_mtu),
        a_ifname=tb.a.underlay_if, b_ifname=tb.b.underlay_if,
        info=_info(p, impl, {"a": [tb.a.underlay_if], "b": [tb.b.underlay_if]}, charons))


def new_psk() -> str:
    return secrets.token_hex(32)


def wait_device(site: Site, before: set[str], prefix: str, timeout: float = 10.0) -> str:
    """The device named prefix* that appeared in `site` since `before` (charon's TUN)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = sorted(n for n in set(site.links.names()) - before
                     if n.startswith(prefix))
        if new:
            return new[0]
        time.sleep(0.05)
    raise CommandFailed(f"charon created no {prefix}* device in site {site.name} within "
                        f"{timeout:g}s", "see the case's error_log (charon log)")


def link_name(tb: Testbed, suffix: str) -> str:
    return names.link_name(tb.run_id, suffix)
