"""Load, pin, attach and edit tbtun with Debian's bpftool and iproute2's tc (argv via proc).

Why bpftool + tc and not libbpf-rs: the object needs no skeleton (settings are map values),
both tools come from Debian packages the project already installs, and every step is one
argv the ledger can undo or `tunbench cleanup` can redo from a journal; no native part of our
own has to be built, versioned and shipped to remote sites. Per site instance:

  /sys/fs/bpf/tb-<run>/<site>/tb_encap, tb_decap     the two programs (pinned)
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
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import proc
from ..capabilities import Missing
from ..errors import CommandFailed, SpecError, TunbenchError
from ..testbed import names
from ..testbed.ledger import Ledger, owner_alive
from . import maps

BPFFS = Path("/sys/fs/bpf")
REPO = Path(__file__).resolve().parents[3]
OBJECT_ENV = "TUNBENCH_TBTUN_OBJ"
TC_PRIO = "0x7b"            # our filters' priority, so they can be removed on their own
MIN_KERNEL = (6, 3)         # bpf_skb_adjust_room's DECAP_L3_* flags
MAP_NAMES = ("tb_rules4", "tb_rules6", "tb_rule_stats", "tb_stats", "tb_config")


def object_path() -> Path:
    """The compiled datapath: $TUNBENCH_TBTUN_OBJ, else build/bpf/tbtun.bpf.o of the checkout."""
    env = os.environ.get(OBJECT_ENV)
    return Path(env) if env else REPO / "build" / "bpf" / "tbtun.bpf.o"


def kernel_too_old(release: str | None = None) -> Missing | None:
    rel = release or platform.release()
    try:
        major, minor = (int(x) for x in rel.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) >= MIN_KERNEL:
        return None
    return Missing(f"kernel {rel}", "tbtun decap needs bpf_skb_adjust_room DECAP_L3 flags "
                   "(Linux >= 6.3)", "run on a newer kernel")


def missing() -> list[Missing]:
    """What this host lacks for tbtun beyond the drivers' declared tools and kernel options."""
    out = [m for m in (kernel_too_old(),) if m]
    if not object_path().is_file():
        out.append(Missing(f"tbtun object {object_path()}", "the eBPF datapath is not built",
                           "run `make bpf` (needs deps/apt-ebpf.txt: clang, libbpf-dev)"))
    return out


# ---- bpffs ------------------------------------------------------------------------------
def bpffs_mounted() -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(ln.split()[1:3] == [str(BPFFS), "bpf"] for ln in mounts if len(ln.split()) > 2)


def ensure_bpffs(ledger: Ledger) -> None:
    """Mount bpffs on /sys/fs/bpf when nothing is mounted there; recorded, so the run that
    mounted it unmounts it again (only once nothing else is pinned in it)."""
    if bpffs_mounted():
        return
    ledger.add("bpffs", path=str(BPFFS))
    proc.run(["mount", "-t", "bpf", "bpffs", str(BPFFS)], timeout=10)


def undo_bpffs(e: dict[str, Any]) -> None:
    path = Path(e["path"])
    if not bpffs_mounted():
        return
    # the kernel's own iterators (maps.debug, progs.debug) appear on every bpffs
    others = [p.name for p in path.iterdir() if not p.name.endswith(".debug")]
    if not others:
        proc.run(["umount", str(path)], timeout=10)


# ---- pins -------------------------------------------------------------------------------
def run_dir(run_id: str) -> Path:
    return BPFFS / f"{names.PREFIX}-{run_id}"


def site_dir(run_id: str, site: str) -> Path:
    return run_dir(run_id) / site


def undo_pins(e: dict[str, Any]) -> None:
    """Unpinning drops the last reference of maps and programs no filter uses any more."""
    shutil.rmtree(e["path"], ignore_errors=True)
    if Path(e["path"]).exists():
        raise OSError(errno.EBUSY, f"could not remove {e['path']}")


def load(ledger: Ledger, run_id: str, site: str) -> Path:
    """Load the object once for `site`, programs and maps pinned under its directory."""
    obj = object_path()
    if not obj.is_file():
        raise TunbenchError(f"tbtun object {obj} is missing", "run `make bpf`")
    ensure_bpffs(ledger)
    top, where = run_dir(run_id), site_dir(run_id, site)
    if not any(e["kind"] == "bpfpins" and e["path"] == str(top) for e in ledger.entries):
        ledger.add("bpfpins", path=str(top))
    where.mkdir(parents=True, exist_ok=False)
    proc.run(["bpftool", "prog", "loadall", str(obj), str(where), "pinmaps",
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
def tc_argv(netns: str | None, *args: str) -> list[str]:
    base = ["tc", *args]
    return ["nsenter", f"--net=/run/netns/{netns}", *base] if netns else base


def ip_argv(netns: str | None, *args: str) -> list[str]:
    base = ["ip", *args]
    return ["nsenter", f"--net=/run/netns/{netns}", *base] if netns else base


def attach(ledger: Ledger, netns: str | None, ifname: str, where: Path,
           decap: str = "tc") -> None:
    """tb_encap on `ifname` egress; decap on its ingress: tb_decap in tc (under a clsact
    qdisc, created when missing) or, with decap="xdp", tb_xdp_decap as the device's native
    (driver mode) XDP program. Recorded before the first change, so teardown removes what we
    added."""
    show = proc.run(tc_argv(netns, "qdisc", "show", "dev", ifname), timeout=10).stdout
    created = "clsact" not in show
    ledger.add("tbtun-tc", netns=netns, name=ifname, qdisc=created, xdp=decap == "xdp")
    if created:
        proc.run(tc_argv(netns, "qdisc", "add", "dev", ifname, "clsact"), timeout=10)
    hooks = (("egress", "tb_encap"),) + ((("ingress", "tb_decap"),) if decap == "tc" else ())
    for hook, prog in hooks:
        proc.run(tc_argv(netns, "filter", "add", "dev", ifname, hook, "prio", TC_PRIO,
                         "handle", "1", "bpf", "da", "pinned", str(where / prog)), timeout=20)
    if decap == "xdp":
        attach_xdp(netns, ifname, where)


def attach_xdp(netns: str | None, ifname: str, where: Path) -> None:
    """tb_xdp_decap in native (driver) mode: generic XDP would run after the skb is built and
    measure nothing tc does not. A device without native XDP is one clear error."""
    r = proc.run(ip_argv(netns, "link", "set", "dev", ifname, "xdpdrv", "pinned",
                         str(where / "tb_xdp_decap")), timeout=20, check=False)
    if r.returncode:
        raise TunbenchError(f"{ifname}: native XDP attach failed: {r.stderr.strip()}",
                            "use decap=tc, or a device whose driver supports XDP (veth, "
                            "most 10G+ NICs)")


def undo_tc(e: dict[str, Any]) -> None:
    netns, ifname = e.get("netns"), e["name"]
    if netns and not Path(f"/run/netns/{netns}").exists():
        return          # the namespace, and the filters with it, are gone
    argvs = ([tc_argv(netns, "qdisc", "del", "dev", ifname, "clsact")] if e.get("qdisc") else
             [tc_argv(netns, "filter", "del", "dev", ifname, hook, "prio", TC_PRIO)
              for hook in (("egress",) if e.get("xdp") else ("egress", "ingress"))])
    if e.get("xdp"):
        argvs.append(ip_argv(netns, "link", "set", "dev", ifname, "xdpdrv", "off"))
    for argv in argvs:
        r = proc.run(argv, timeout=10, check=False)
        if r.returncode and not any(s in r.stderr for s in ("Cannot find device",
                                                             "No such file", "Invalid handle",
                                                             "does not exist")):
            raise CommandFailed(f"{' '.join(argv)}: {r.stderr.strip()}")


def xdp_prog(netns: str | None, ifname: str) -> str:
    """The name of the XDP program on `ifname` ("" when none), for checks and tests."""
    r = proc.run(ip_argv(netns, "-j", "-d", "link", "show", "dev", ifname), timeout=10,
                 check=False)
    rows = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    xdp = rows[0].get("xdp", {}) if rows else {}
    return str(xdp.get("prog", {}).get("name", ""))


def filters(netns: str | None, ifname: str) -> dict[str, list[str]]:
    """Names of the bpf programs on `ifname` per hook (for checks and tests)."""
    out: dict[str, list[str]] = {}
    for hook in ("egress", "ingress"):
        r = proc.run(tc_argv(netns, "-j", "filter", "show", "dev", ifname, hook), timeout=10,
                     check=False)
        rows = json.loads(r.stdout or "[]") if r.returncode == 0 else []
        out[hook] = [str(x.get("options", {}).get("bpf_name", "")) for x in rows
                     if x.get("kind") == "bpf" and x.get("options")]
    return out


# ---- maps -------------------------------------------------------------------------------
def map_path(where: Path, name: str) -> Path:
    return where / "maps" / name


def check_site(where: Path) -> Path:
    """A pinned tbtun site directory, or one clear error."""
    if not all(map_path(where, m).exists() for m in MAP_NAMES):
        raise SpecError(f"{where} is not a running tbtun site (no pinned tbtun maps there)",
                        f"pass a site directory like {BPFFS}/tb-<run>/a; `tunbench "
                        "tunnel-rules list` without --site lists them")
    return where


def sites() -> list[Path]:
    """Every pinned tbtun site on this host."""
    if not BPFFS.is_dir():
        return []
    return sorted(p.parent.parent for p in BPFFS.glob(f"{names.PREFIX}-*/*/maps/tb_config"))


def configure(where: Path, *, local4: str, realm: int, mtu: int, vxlan_port: int,
              geneve_port: int) -> None:
    value = maps.pack_config(local4=local4, realm=realm, mtu=mtu, vxlan_port=vxlan_port,
                             geneve_port=geneve_port)
    _batch([_update(map_path(where, "tb_config"), b"\0\0\0\0", value)])


def _update(path: Path, key: bytes, value: bytes) -> list[str]:
    return ["map", "update", "pinned", str(path), "key", "hex", *maps.hexbytes(key),
            "value", "hex", *maps.hexbytes(value)]


def _batch(commands: list[list[str]]) -> None:
    """Many bpftool commands in one process (`bpftool batch file`): 1000 rules in one go."""
    if not commands:
        return
    if len(commands) == 1:
        proc.run(["bpftool", *commands[0]], timeout=30)
        return
    with tempfile.NamedTemporaryFile("w", prefix="tb-tbtun-", suffix=".batch") as f:
        f.write("".join(" ".join(c) + "\n" for c in commands))
        f.flush()
        proc.run(["bpftool", "batch", "file", f.name], timeout=120)


def _dump(path: Path) -> list[dict[str, Any]]:
    out = proc.run(["bpftool", "-j", "map", "dump", "pinned", str(path)], timeout=60).stdout
    rows: list[dict[str, Any]] = json.loads(out or "[]")
    return rows


def list_rules(where: Path) -> list[maps.Rule]:
    rules = []
    for name in ("tb_rules4", "tb_rules6"):
        for row in _dump(map_path(where, name)):
            prefix = maps.unpack_key(maps.bpftool_bytes(row["key"]))
            rules.append(maps.unpack_rule(prefix, maps.bpftool_bytes(row["value"])))
    return sorted(rules, key=lambda r: r.id)


def add_rules(where: Path, rules: Iterable[maps.Rule]) -> list[maps.Rule]:
    """Insert or replace rules by prefix. A new prefix gets the lowest free counter slot
    (its counters start at zero); a replaced one keeps its slot and counters."""
    have = {r.prefix: r for r in list_rules(where)}
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
    _batch(commands)
    return out


def del_rules(where: Path, prefixes: Iterable[str]) -> list[str]:
    have = {r.prefix for r in list_rules(where)}
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
    _batch(commands)
    return gone


def rule_counters(where: Path) -> dict[int, tuple[int, int]]:
    """Counter slot -> (packets, bytes), summed over CPUs, of every slot that moved."""
    out = {}
    for row in _dump(map_path(where, "tb_rule_stats")):
        key = int.from_bytes(maps.bpftool_bytes(row["key"]), "little")
        pk, by = maps.sum_percpu(row.get("values", []))
        if pk or by:
            out[key] = (pk, by)
    return out


def stats(where: Path) -> dict[str, dict[str, int]]:
    """The datapath's own counters (tb_stats), summed over CPUs."""
    out = {}
    for row in _dump(map_path(where, "tb_stats")):
        key = int.from_bytes(maps.bpftool_bytes(row["key"]), "little")
        if key < len(maps.STATS):
            pk, by = maps.sum_percpu(row.get("values", []))
            out[maps.STATS[key]] = {"packets": pk, "bytes": by}
    return out
