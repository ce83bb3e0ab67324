"""Load, pin, attach and edit tbtun with Debian's bpftool and iproute2's tc (argv via proc),
or attach by tcx (bpf links, Linux >= 6.6; remote/agent/bpfhost.py: no Debian 12 tool can).

Why bpftool + tc and not libbpf-rs: the object needs no skeleton (settings are map values),
both tools come from Debian packages the project already installs, and every step is one
argv the ledger can undo or `tunbench cleanup` can redo from a journal; no native loader of
our own has to be built per architecture and shipped to remote sites (only the .bpf.o, which
is bytecode). Every step runs through the site (`Site.run_host`), so one code path serves a
namespace here and a host over SSH (its agent runs the argv and journals the undo). Per site
instance, on that site's host:

  /sys/fs/bpf/tb-<run>/<site>/tb_encap, tb_decap     the two programs (pinned)
  /sys/fs/bpf/tb-<run>/<site>/link_tb_encap, ...     their tcx links (attach by tcx)
  /sys/fs/bpf/tb-<run>/<site>/maps/tb_rules4 ...     its maps (pinned)

tc runs under `nsenter --net` rather than `tc -n`/`ip netns exec`: those remount /sys in a
private mount namespace, hiding the pins in /sys/fs/bpf.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import platform
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import proc
from ..capabilities import Missing
from ..errors import CommandFailed, SpecError, TunbenchError, UnavailableError
from ..remote.agent import bpfhost
from ..testbed import names
from ..testbed.base import Site, Testbed
from ..testbed.ledger import Ledger, owner_alive, register_undo
from . import maps

BPFFS = Path("/sys/fs/bpf")
REPO = Path(__file__).resolve().parents[3]
OBJECT_ENV = "TUNBENCH_TBTUN_OBJ"
TC_PRIO = bpfhost.TC_PRIO   # our filters' priority, so they can be removed on their own
MIN_KERNEL = (6, 1)         # the oldest kernel the VM lab proves (Debian 12's)
TC_DECAP_IPV6_KERNEL = (6, 3)   # bpf_skb_adjust_room's DECAP_L3_IPV6 flag (IPv6 inside)
MAP_NAMES = ("tb_rules4", "tb_rules6", "tb_rule_stats", "tb_stats", "tb_config")


def object_path() -> Path:
    """The compiled datapath: $TUNBENCH_TBTUN_OBJ, else build/bpf/tbtun.bpf.o of the checkout."""
    env = os.environ.get(OBJECT_ENV)
    return Path(env) if env else REPO / "build" / "bpf" / "tbtun.bpf.o"


def _version(release: str) -> tuple[int, int] | None:
    try:
        major, minor = (int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        return None
    return major, minor


def kernel_too_old(release: str | None = None) -> Missing | None:
    rel = release or platform.release()
    have = _version(rel)
    if have is None or have >= MIN_KERNEL:
        return None
    return Missing(f"kernel {rel}", "tbtun needs Linux >= 6.1 (bpf_skb_adjust_room's "
                   "ENCAP_L2_ETH, bpf_redirect_neigh; 6.1 is the oldest proven)",
                   "run on a newer kernel")


def tc_decap_ipv6(release: str) -> str:
    """Whether tc decap carries IPv6 inside on a kernel of that release: "" when it does,
    else why not (recorded in the case; XDP decap carries IPv6 on every supported kernel)."""
    have = _version(release)
    if have is None or have >= TC_DECAP_IPV6_KERNEL:
        return ""
    return (f"kernel {release} < 6.3 has no bpf_skb_adjust_room DECAP_L3_IPV6: tc decap "
            "carries IPv4 inside only (IPv6 packets are counted as decap errors; decap=xdp "
            "carries both)")


def object_missing() -> list[Missing]:
    """The compiled object, on the host that runs tunbench (copied to remote sites)."""
    if object_path().is_file():
        return []
    return [Missing(f"tbtun object {object_path()}", "the eBPF datapath is not built",
                    "run `make bpf` (needs deps/apt-ebpf.txt: clang, libbpf-dev)")]


def missing() -> list[Missing]:
    """What this host lacks for tbtun beyond the drivers' declared tools and kernel options."""
    return [m for m in (kernel_too_old(),) if m] + object_missing()


# ---- the host a site runs on -------------------------------------------------------------
def here(netns: str | None = None) -> Site:
    """A site on this host (a namespace, or the root namespace): the CLI's and the hub's."""
    return Site("here", netns, "", "", "")


def _local_run(argv: list[str]) -> tuple[int, str]:
    r = proc.run(argv, timeout=20, check=False)
    return r.returncode, r.stderr


# ---- bpffs ------------------------------------------------------------------------------
def bpffs_mounted(site: Site | None = None) -> bool:
    """Whether bpffs is mounted on /sys/fs/bpf on the host of `site` (this one by default)."""
    try:
        text = (site or here()).read_file("/proc/self/mounts").decode()
    except (OSError, CommandFailed):
        return False
    return bpfhost.mounted(text, str(BPFFS))


def ensure_bpffs(ledger: Ledger, site: Site | None = None) -> None:
    """Mount bpffs on /sys/fs/bpf of the site's host when nothing is mounted there; recorded
    (journaled on that host too), so the run that mounted it unmounts it again (only once
    nothing else is pinned in it)."""
    site = site or here()
    if bpffs_mounted(site):
        return
    site.record_host_object(ledger, "bpffs", path=str(BPFFS))
    site.run_host(["mount", "-t", "bpf", "bpffs", str(BPFFS)], timeout=10)


@register_undo("bpffs")
def undo_bpffs(e: dict[str, Any]) -> None:
    """bpffs mounted on /sys/fs/bpf by a tbtun run: unmounted once nothing is pinned."""
    bpfhost.undo_bpffs(e, _local_run)


# ---- pins -------------------------------------------------------------------------------
def run_dir(run_id: str) -> Path:
    return BPFFS / f"{names.PREFIX}-{run_id}"


def site_dir(run_id: str, site: str) -> Path:
    return run_dir(run_id) / site


@register_undo("bpfpins")
def undo_pins(e: dict[str, Any]) -> None:
    """A run's tbtun pins (/sys/fs/bpf/tb-<run>). Unpinning drops the last reference of maps
    and programs no filter uses any more."""
    try:
        bpfhost.undo_pins(e, _local_run)
    except OSError:
        raise OSError(errno.EBUSY, f"could not remove {e['path']}") from None


def ship_object(tb: Testbed, site: Site) -> str:
    """The compiled datapath as `site` reads it: our build here; on a remote host a copy in
    the case directory there (removed with it). A .bpf.o is BPF bytecode, the same for every
    architecture; the site's kernel verifies and JITs it at load."""
    obj = object_path()
    if not obj.is_file():
        raise TunbenchError(f"tbtun object {obj} is missing", "run `make bpf`")
    if not site.remote:
        return str(obj)
    path = tb.site_dir(site) / obj.name
    if not site.exists(path):
        site.write_file(tb.ledger, path, obj.read_bytes(), mode=0o600)
        tb.notes.setdefault("tbtun_copied_to", {})[site.name] = str(path)
    return str(path)


def load(ledger: Ledger, run_id: str, name: str, site: Site | None = None,
         obj: str | None = None) -> Path:
    """Load the object once for site `name`, programs and maps pinned under its directory on
    the host of `site` (this host by default; `obj`: the object's path there)."""
    site = site or here()
    obj = obj or str(object_path())
    if not site.remote and not Path(obj).is_file():
        raise TunbenchError(f"tbtun object {obj} is missing", "run `make bpf`")
    too_old = kernel_too_old(site.run(["uname", "-r"], timeout=10).stdout.strip())
    if too_old:
        raise TunbenchError(f"{site.where}: {too_old.what}: {too_old.why}", too_old.fix)
    ensure_bpffs(ledger, site)
    top, where = run_dir(run_id), site_dir(run_id, name)
    if not any(e["kind"] == "bpfpins" and e["path"] == str(top) for e in ledger.entries) \
            and not site.exists(top):
        site.record_host_object(ledger, "bpfpins", path=str(top))
        site.run_host(["mkdir", str(top)], timeout=10)
    site.run_host(["mkdir", str(where)], timeout=10)    # fails when it exists: never reused
    site.run_host(["bpftool", "prog", "loadall", obj, str(where), "pinmaps",
                   str(where / "maps")], timeout=60)
    return where


def sweep(run_id: str | None = None) -> list[str]:
    """Remove pin directories of crashed runs (of `run_id` only when given)."""
    removed: list[str] = []
    if not BPFFS.is_dir():
        return removed
    for d in BPFFS.glob(f"{names.PREFIX}-*"):
        rid = d.name[len(names.PREFIX) + 1:]
        if len(rid) != names.RUN_ID_LEN or (run_id is None and owner_alive(rid)):
            continue
        if run_id is None or rid == run_id:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"bpf pins {d}")
    return removed


# ---- tc ---------------------------------------------------------------------------------
tc_argv = bpfhost.tc_argv
ip_argv = bpfhost.ip_argv


ATTACHES = ("auto", "tc", "tcx")


def attach_method(asked: str, release: str, what: str = "tbtun") -> str:
    """"tc" or "tcx" for an `attach` setting on a kernel `release`: auto takes tcx where the
    kernel has it (>= 6.6), clsact + cls_bpf elsewhere; attach=tcx where it has not is
    refused (UnavailableError naming `what`), so callers ask before they change anything."""
    if asked == "tcx" and tcx_missing(release):
        raise UnavailableError(f"{what}: attach=tcx: {tcx_missing(release)}",
                               "use attach=auto or attach=tc")
    if asked != "auto":
        return asked
    v = _version(release)
    return "tcx" if v is not None and v >= bpfhost.TCX_MIN_KERNEL else "tc"


def tcx_missing(release: str) -> str:
    """Why attach=tcx cannot work on a kernel `release` ("" when it can)."""
    v = _version(release)
    if v is not None and v < bpfhost.TCX_MIN_KERNEL:
        return (f"tcx needs Linux >= {'.'.join(map(str, bpfhost.TCX_MIN_KERNEL))}, "
                f"this kernel is {release}")
    return ""


def attach(ledger: Ledger, netns: str | None, ifname: str, where: Path,
           decap: str = "tc", site: Site | None = None, how: str = "tc") -> None:
    """tb_encap on `ifname` egress; decap on its ingress: tb_decap in tc or, with
    decap="xdp", tb_xdp_decap as the device's native (driver mode) XDP program. `how` is the
    tc attachment: "tc" (a clsact qdisc, created when missing, and cls_bpf filters) or "tcx"
    (bpf links, Linux >= 6.6: no qdisc, no classifier layer; pinned next to the programs).
    Recorded before the first change (journaled on a remote host too), so teardown removes
    what we added."""
    site = site or here(netns)
    hooks = (("egress", "tb_encap"),) + ((("ingress", "tb_decap"),) if decap == "tc" else ())
    if how == "tcx":
        links = [str(where / f"link_{prog}") for _, prog in hooks]
        site.record_host_object(ledger, "tbtun-tc", netns=site.netns, name=ifname,
                                qdisc=False, xdp=decap == "xdp", tcx=True, links=links)
        for (hook, prog), link in zip(hooks, links):
            site.tcx_attach(ifname, hook, str(where / prog), link)
    else:
        show = site.run_host(["tc", "qdisc", "show", "dev", ifname], timeout=10).stdout
        created = "clsact" not in show
        site.record_host_object(ledger, "tbtun-tc", netns=site.netns, name=ifname,
                                qdisc=created, xdp=decap == "xdp")
        if created:
            site.run_host(["tc", "qdisc", "add", "dev", ifname, "clsact"], timeout=10)
        for hook, prog in hooks:
            site.run_host(["tc", "filter", "add", "dev", ifname, hook, "prio", TC_PRIO,
                           "handle", "1", "bpf", "da", "pinned", str(where / prog)],
                          timeout=20)
    if decap == "xdp":
        attach_xdp(site, ifname, where)


def attach_xdp(site: Site, ifname: str, where: Path) -> None:
    """tb_xdp_decap in native (driver) mode: generic XDP would run after the skb is built and
    measure nothing tc does not. A device without native XDP is one clear error."""
    r = site.run_host(["ip", "link", "set", "dev", ifname, "xdpdrv", "pinned",
                       str(where / "tb_xdp_decap")], timeout=20, check=False)
    if r.returncode:
        raise TunbenchError(f"{ifname}: native XDP attach failed: {r.stderr.strip()}",
                            "use decap=tc, or a device whose driver supports XDP (veth, "
                            "most 10G+ NICs)")


@register_undo("tbtun-tc")
def undo_tc(e: dict[str, Any]) -> None:
    """tbtun's tc filters (and the clsact qdisc when it created it) on an underlay device."""
    try:
        bpfhost.undo_tc(e, _local_run)
    except OSError as exc:
        raise CommandFailed(str(exc)) from None


def xdp_prog(netns: str | None, ifname: str, site: Site | None = None) -> str:
    """The name of the XDP program on `ifname` ("" when none), for checks and tests."""
    site = site or here(netns)
    r = site.run_host(["ip", "-j", "-d", "link", "show", "dev", ifname], timeout=10,
                      check=False)
    rows = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    xdp = rows[0].get("xdp", {}) if rows else {}
    return str(xdp.get("prog", {}).get("name", ""))


def filters(netns: str | None, ifname: str, site: Site | None = None) -> dict[str, list[str]]:
    """Names of the bpf programs on `ifname` per hook, tc filters then tcx links (for checks
    and tests)."""
    site = site or here(netns)
    out: dict[str, list[str]] = {}
    for hook in ("egress", "ingress"):
        r = site.run_host(["tc", "-j", "filter", "show", "dev", ifname, hook], timeout=10,
                          check=False)
        rows = json.loads(r.stdout or "[]") if r.returncode == 0 else []
        out[hook] = [str(x.get("options", {}).get("bpf_name", "")).split(":")[0] for x in rows
                     if x.get("kind") == "bpf" and x.get("options")]
        out[hook] += [prog_name(i, site) for i in site.tcx_prog_ids(ifname, hook)]
    return out


def tcx_attached(netns: str | None, ifname: str, site: Site | None = None) -> bool:
    """Whether any program is attached to `ifname` by tcx."""
    site = site or here(netns)
    return any(site.tcx_prog_ids(ifname, hook) for hook in ("egress", "ingress"))


def attached_by(where: Path, site: Site | None = None) -> str:
    """How the tbtun instance pinned at `where` is attached: "tcx" when its links are pinned
    there, else "tc" (or XDP decap, which the pins do not tell)."""
    return "tcx" if (site or here()).exists(where / "link_tb_encap") else "tc"


def prog_name(prog_id: int, site: Site) -> str:
    r = site.run_host(["bpftool", "-j", "prog", "show", "id", str(prog_id)], timeout=10,
                      check=False)
    return str(json.loads(r.stdout).get("name", "")) if r.returncode == 0 else ""


# ---- maps -------------------------------------------------------------------------------
def map_path(where: Path, name: str) -> Path:
    return where / "maps" / name


def check_site(where: Path, site: Site | None = None) -> Path:
    """A pinned tbtun site directory (on the host of `site`), or one clear error."""
    site = site or here()
    if not all(site.exists(map_path(where, m)) for m in MAP_NAMES):
        raise SpecError(f"{where} is not a running tbtun site (no pinned tbtun maps there)",
                        f"pass a site directory like {BPFFS}/tb-<run>/a; `tunbench "
                        "tunnel-rules list` without --site lists them")
    return where


def sites(on: Site | None = None) -> list[Path]:
    """Every pinned tbtun site on the host of `on` (this host by default)."""
    if on is None or not on.remote:
        if not BPFFS.is_dir():
            return []
        return sorted(p.parent.parent for p in BPFFS.glob(f"{names.PREFIX}-*/*/maps/tb_config"))
    # there: the glob is find's, its arguments an argv (no shell)
    out = on.run_host(["find", str(BPFFS), "-mindepth", "4", "-maxdepth", "4", "-path",
                       f"{BPFFS}/{names.PREFIX}-*/*/maps/tb_config"], check=False,
                      timeout=20).stdout
    return sorted(Path(p).parent.parent for p in out.split())


def configure(where: Path, *, local4: str, realm: int, mtu: int, vxlan_port: int,
              geneve_port: int, site: Site | None = None) -> None:
    value = maps.pack_config(local4=local4, realm=realm, mtu=mtu, vxlan_port=vxlan_port,
                             geneve_port=geneve_port)
    _batch([_update(map_path(where, "tb_config"), b"\0\0\0\0", value)], site)


def _update(path: Path, key: bytes, value: bytes) -> list[str]:
    return ["map", "update", "pinned", str(path), "key", "hex", *maps.hexbytes(key),
            "value", "hex", *maps.hexbytes(value)]


def _batch(commands: list[list[str]], site: Site | None = None) -> None:
    """Many bpftool commands in one process (`bpftool batch file -`, the lines on stdin):
    1000 rules in one go, on the site's host, with no file to create there."""
    if not commands:
        return
    site = site or here()
    if len(commands) == 1:
        site.run_host(["bpftool", *commands[0]], timeout=30)
        return
    site.run_host(["bpftool", "batch", "file", "-"], timeout=120,
                  input="".join(" ".join(c) + "\n" for c in commands))


def _dump(path: Path, site: Site | None = None) -> list[dict[str, Any]]:
    out = (site or here()).run_host(["bpftool", "-j", "map", "dump", "pinned", str(path)],
                                    timeout=60).stdout
    rows: list[dict[str, Any]] = json.loads(out or "[]")
    return rows


def list_rules(where: Path, site: Site | None = None) -> list[maps.Rule]:
    rules = []
    for name in ("tb_rules4", "tb_rules6"):
        for row in _dump(map_path(where, name), site):
            prefix = maps.unpack_key(maps.bpftool_bytes(row["key"]))
            rules.append(maps.unpack_rule(prefix, maps.bpftool_bytes(row["value"])))
    return sorted(rules, key=lambda r: r.id)


def add_rules(where: Path, rules: Iterable[maps.Rule], site: Site | None = None
              ) -> list[maps.Rule]:
    """Insert or replace rules by prefix. A new prefix gets the lowest free counter slot
    (its counters start at zero); a replaced one keeps its slot and counters."""
    have = {r.prefix: r for r in list_rules(where, site)}
    used = {r.id for r in have.values()}
    free = (i for i in range(maps.MAX_RULES) if i not in used)
    commands, out = [], []
    for rule in rules:
        problems = rule.problems()
        if problems:
            raise SpecError(f"rule {rule.prefix}: {'; '.join(problems)}",
                            "see `tunbench tunnel-rules add --help`")
        old = have.get(rule.prefix)
        rid = old.id if old else next(free, None)
        if rid is None:
            raise SpecError(f"rule {rule.prefix}: all {maps.MAX_RULES} rule slots are in use",
                            "delete rules first")
        rule = maps.Rule(rule.prefix, rule.remote, rule.vni, rule.encap, rule.port,
                         rule.inner_mac, rid)
        table = "tb_rules4" if maps.family(rule.prefix) == 4 else "tb_rules6"
        if not old:
            zero = b"\0" * 16
            commands.append(_update(map_path(where, "tb_rule_stats"), rid.to_bytes(4, "little"),
                                    zero))
        commands.append(_update(map_path(where, table), maps.pack_key(rule.prefix),
                                maps.pack_rule(rule)))
        have[rule.prefix] = rule
        out.append(rule)
    _batch(commands, site)
    return out


def del_rules(where: Path, prefixes: Iterable[str], site: Site | None = None) -> list[str]:
    have = {r.prefix for r in list_rules(where, site)}
    commands, gone = [], []
    for prefix in prefixes:
        try:
            norm = str(ipaddress.ip_network(prefix, strict=True))
        except ValueError as exc:
            raise SpecError(f"prefix {prefix!r}: {exc}",
                            "give a network like 198.19.0.0/24") from None
        if norm not in have:
            raise SpecError(f"no rule for {norm}", "`tunbench tunnel-rules list` shows them")
        table = "tb_rules4" if maps.family(norm) == 4 else "tb_rules6"
        commands.append(["map", "delete", "pinned", str(map_path(where, table)), "key", "hex",
                         *maps.hexbytes(maps.pack_key(norm))])
        gone.append(norm)
    _batch(commands, site)
    return gone


def rule_counters(where: Path, site: Site | None = None) -> dict[int, tuple[int, int]]:
    """Counter slot -> (packets, bytes), summed over CPUs, of every slot that moved."""
    out = {}
    for row in _dump(map_path(where, "tb_rule_stats"), site):
        key = int.from_bytes(maps.bpftool_bytes(row["key"]), "little")
        pk, by = maps.sum_percpu(row.get("values", []))
        if pk or by:
            out[key] = (pk, by)
    return out


def stats(where: Path, site: Site | None = None) -> dict[str, dict[str, int]]:
    """The datapath's own counters (tb_stats), summed over CPUs."""
    out = {}
    for row in _dump(map_path(where, "tb_stats"), site):
        key = int.from_bytes(maps.bpftool_bytes(row["key"]), "little")
        if key < len(maps.STATS):
            pk, by = maps.sum_percpu(row.get("values", []))
            out[maps.STATS[key]] = {"packets": pk, "bytes": by}
    return out
