"""The two sites of a testbed and the testbed itself, as seen by tunnels and workloads.

A tunnel driver or workload never asks how a site is reached: it calls `site.run(argv)` or
`testbed.spawn(site, argv)`, and does netlink through `site.links`. A local site (a namespace,
or this host's root namespace) is reached in this process (`ip netns exec`, pyroute2); a
remote site (testbed/remote.py, a subclass) over SSH through its agent, behind the same calls:
the Site methods below are the only place where the two differ.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..remote.agent import bpfhost
from .ledger import Ledger
from .netlink import NetnsLinks
from .placement import confine
from .sitecores import join_argv


@dataclass(frozen=True)
class PrivateMounts:
    """Private runtime directories for a daemon whose pid/socket paths are compiled in
    (charon, sshd): a tmpfs on each of `tmpfs` seen by it alone, `mkdirs` made there, `keep`
    (e.g. the case directory under /run/tunbench) bind-mounted back so it stays visible."""
    tmpfs: tuple[str, ...] = ("/run",)
    mkdirs: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The options of tunbench.privrun (and of the agent's twin, tbagent.privrun)."""
        out: list[str] = []
        for flag, paths in (("--tmpfs", self.tmpfs), ("--mkdir", self.mkdirs),
                            ("--keep", self.keep)):
            for path in paths:
                out += [flag, path]
        return out


@dataclass(frozen=True)
class Site:
    name: str            # "a" (client side) or "b" (server side)
    netns: str | None    # network namespace, None for the root namespace of a host
    underlay_if: str     # the interface facing the other site
    underlay4: str       # underlay IPv4 address of this site (no prefix length)
    underlay6: str       # underlay IPv6 address of this site
    host: str | None = None   # the machine this site runs on; None: this host (namespaces)

    def run(self, argv: list[str], **kw: Any) -> proc.Completed:
        return proc.run(argv, netns=self.netns, **kw)

    def tcx_attach(self, ifname: str, hook: str, prog_pin: str, link_pin: str) -> None:
        """Attach a pinned tc program by tcx on this site's host and pin the link
        (remote/agent/bpfhost.py; no Debian 12 tool does it)."""
        bpfhost.tcx_attach(self.netns, ifname, hook, prog_pin, link_pin)

    def tcx_prog_ids(self, ifname: str, hook: str) -> list[int]:
        """IDs of the programs on `ifname`'s tcx hook of this site's host."""
        return bpfhost.tcx_prog_ids(self.netns, ifname, hook)

    def run_host(self, argv: list[str], **kw: Any) -> proc.Completed:
        """argv in this site's network namespace with its host's mounts in view: bpftool and
        tc on pinned programs (`ip netns exec` remounts /sys, which hides /sys/fs/bpf; so a
        namespace is entered with `nsenter --net` only)."""
        if self.netns:
            argv = ["nsenter", f"--net=/run/netns/{self.netns}", *argv]
        return proc.run(argv, **kw)

    def record_host_object(self, ledger: Ledger, kind: str, **info: Any) -> None:
        """An object made on this site's host by commands, that only remote/agent/bpfhost.py
        knows how to undo (tbtun's bpffs mount, pin directory, tc attachment): a ledger entry
        here; on a remote host also journaled there by its agent (RemoteSite)."""
        ledger.add(kind, **info)

    @property
    def links(self) -> NetnsLinks:
        """Netlink on this site (links, addresses, counters)."""
        return NetnsLinks(self.netns)

    @property
    def where(self) -> str:
        """How results name this site's devices: its namespace (or host)."""
        return str(self.netns) if self.netns is not None else str(self.host)

    @property
    def remote(self) -> bool:
        return False

    def spawn(self, argv: list[str], workdir: Path, label: str, *,
              env: dict[str, str] | None, split_stderr: bool,
              private: PrivateMounts | None = None) -> proc.Process:
        if private is not None:
            # `ip netns exec` gives the daemon a mount namespace of its own; this host's root
            # namespace (a `local` site) does not: unshare one, or the tmpfs would hide the
            # host's /run
            argv = [sys.executable, "-m", "tunbench.privrun", *private.argv(), "--", *argv]
            if self.netns is None:
                argv = ["unshare", "--mount", "--propagation", "slave", *argv]
        return proc.spawn(argv, netns=self.netns, log_path=workdir / f"{label}.log", env=env,
                          label=label, split_stderr=split_stderr)

    def which(self, tool: str) -> str:
        """Full path of `tool` on this site's host (sbin and libexec directories included:
        charon, sshd), or an UnavailableError naming the package."""
        return proc.require(tool)

    def adopt_children(self, ledger: Ledger, p: proc.Process, label: str,
                       grace: float = 3.0, settle_titles: tuple[str, ...] = (),
                       settle_timeout: float = 5.0) -> list[int]:
        """Register the descendants of `p` (a daemon's per-connection processes, which
        outlive its SIGTERM) in the ledger; returns their PIDs. With `settle_titles`, first
        wait (at most `settle_timeout` s) until no descendant's process title (cmdline)
        contains one of them: processes on their way out (sshd's pre-auth children) are
        then gone, not registered; on timeout, what is there is registered all the same.
        The wait is proc.settle_descendants, which a remote site's agent runs too."""
        proc.settle_descendants(p.pid, settle_titles, settle_timeout)
        pids = proc.descendants(p.pid)
        for pid in pids:
            ledger.add("process", pid=pid, starttime=proc.proc_starttime(pid), label=label,
                       grace=grace)
        return pids

    def process_gone(self, ledger: Ledger, pid: int) -> str | None:
        """Why a process we started on this site is no longer running ("died"), or None
        while it runs (or is not ours to judge)."""
        for e in ledger.entries:
            if e["kind"] == "process" and e["pid"] == pid:
                return None if proc.pid_alive(pid, e.get("starttime")) else "died"
        return None

    def exists(self, path: Path | str) -> bool:
        """Whether `path` exists on this site's host."""
        return os.path.lexists(path)

    def record_leftover(self, ledger: Ledger, path: Path | str) -> None:
        """A file a daemon of ours makes on this site's host and may leave when killed (a
        socket), removed at teardown. On a remote host the agent stops its daemons with
        SIGTERM, so they remove their own (RemoteSite: nothing to record)."""
        ledger.path(Path(path))

    def read_file(self, path: Path | str) -> bytes:
        """A file a program on this site wrote (on this site's host)."""
        return Path(path).read_bytes()

    def cpu_sampler(self, interval: float) -> Any:
        """CPU per core of this site's host (a sampler with track/start/stop)."""
        from ..metrics.cpu import CpuSampler
        return CpuSampler(interval)

    def record_process(self, ledger: Ledger, p: proc.Process, grace: float) -> None:
        ledger.process(p, grace=grace)

    def record_link(self, ledger: Ledger, ifname: str) -> None:
        ledger.link(ifname, self.netns)

    def record_command(self, ledger: Ledger, argv: list[str],
                       gone: tuple[str, ...] = ()) -> None:
        """An argv that undoes something on this site, run at teardown; `gone`: stderr
        messages that mean the object is already gone (not a failure)."""
        ledger.command(argv, self.netns, gone)

    def make_dir(self, ledger: Ledger, path: Path) -> None:
        """A private (0700) directory on this site's host, removed at teardown."""
        path.mkdir(mode=0o700)
        ledger.path(path)

    @property
    def management_if(self) -> str:
        """The interface carrying our SSH session to this site ("" on the local testbed):
        never changed."""
        return ""

    def write_file(self, ledger: Ledger, path: Path, raw: bytes, mode: int = 0o600) -> None:
        """Create `path` with `mode` (O_EXCL: never over an existing file), in the ledger."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        ledger.path(path)


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class
    kind: str
    run_id: str
    a: Site
    b: Site
    underlay_mtu: int
    ledger: Ledger
    workdir: Path                 # private (0700) directory for this case: logs, keys, configs
    rate: str | None = None       # underlay shaping (tbf), e.g. "500mbit"
    shares_cpus: bool = True      # both sites run on the same CPUs (true for namespaces)
    prefix4: int = 24
    prefix6: int = 64
    notes: dict[str, Any] = field(default_factory=dict)
    # programs copied to a site for this case (site name -> path there)
    shipped: dict[str, str] = field(default_factory=dict, repr=False)
    # prefixes each site forwards for (site name -> CIDRs): set when the sites are the
    # gateways of a chain (chain/gateway.py); a tunnel driver lets them into its tunnel
    # (WireGuard allowed-ips, IPsec traffic selectors) besides the inner addresses
    behind: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # a tag in the names of system-wide objects (wireguard-go's interfaces): the chain's
    # gateway tunnel and a site tunnel of the same run must not clash
    link_tag: str = ""
    # a chain's placed hops (chain/base.Hop), each knowing how to reach its namespace on its
    # host: the per-hop figures read them (chain/hops.py)
    hops: list[Any] = field(default_factory=list, repr=False)
    # per-site CPU placement (testbed/placement.py): site name -> cpulist its processes are
    # started on (empty: placement off); and each confined process's label -> its cpulist
    placement: dict[str, str] = field(default_factory=dict)
    placed_processes: dict[str, str] = field(default_factory=dict, repr=False)
    # site size in cores (testbed/sitecores.py): site name -> its cpuset cgroup, which every
    # process the site starts joins; and each such process's label -> its site
    cgroups: dict[str, Path] = field(default_factory=dict)
    cgroup_processes: dict[str, str] = field(default_factory=dict, repr=False)

    def sites(self) -> tuple[Site, Site]:
        return self.a, self.b

    def other(self, site: Site) -> Site:
        return self.b if site is self.a else self.a

    def site_dir(self, site: Site) -> Path:
        """The case's private directory on the host of `site` (files a site's programs
        read or write): the local workdir, or /run/tunbench/<run id> on a remote host."""
        remote_dir = getattr(site, "workdir", None)
        return Path(remote_dir) if remote_dir else self.workdir

    def spawn(self, site: Site, argv: list[str], label: str, *,
              env: dict[str, str] | None = None, grace: float = 3.0,
              split_stderr: bool = False, private: PrivateMounts | None = None
              ) -> proc.Process:
        """Start a process in a site, logging to its workdir, registered in the ledger;
        `private`: with private runtime directories (the case directory stays visible)."""
        if private is not None:
            private = PrivateMounts(private.tmpfs, private.mkdirs,
                                    (*private.keep, str(self.site_dir(site))))
        cpus = self.placement.get(site.name)
        if cpus is not None:   # per-site placement: started on the site's CPUs only
            argv = confine(argv, cpus)
            self.placed_processes[label] = cpus
        cgroup = self.cgroups.get(site.name)
        if cgroup is not None:   # site size in cores: in the site's cpuset cgroup from exec
            argv = join_argv(cgroup, argv)
            self.cgroup_processes[label] = site.name
        p = site.spawn(argv, self.site_dir(site), label, env=env, split_stderr=split_stderr,
                       private=private)
        site.record_process(self.ledger, p, grace)
        return p

    def write_text(self, site: Site, name: str, text: str) -> Path:
        """A configuration file (0600) in the case directory on the host of `site`, removed
        at teardown; returns its path there."""
        path = self.site_dir(site) / name
        site.write_file(self.ledger, path, text.encode())
        return path

    def write_secret(self, name: str, data: str | bytes, site: Site | None = None) -> Path:
        """Write a secret (key, PSK) mode 0600 in the private workdir of the host of `site`
        (this host when None); removed at teardown. The content never enters an argv."""
        where = site or self.a
        path = self.site_dir(where) / name
        where.write_file(self.ledger, path, data.encode() if isinstance(data, str) else data)
        return path

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "run_id": self.run_id, "underlay_mtu": self.underlay_mtu,
            "rate": self.rate, "shares_cpus": self.shares_cpus,
            "sites": {s.name: {"netns": s.netns, "host": s.host, "underlay_if": s.underlay_if,
                               "underlay4": s.underlay4, "underlay6": s.underlay6}
                      for s in self.sites()},
            **self.notes,
        }
