"""Sites on real hosts: a site reached over SSH, behind the same calls as a namespace.

A `RemoteSite` is a `Site` whose `run`, `spawn`, `links` and file writes go to the tunbench
agent on its host (remote/agent/, one per site for the whole campaign, over one OpenSSH
ControlMaster connection). Drivers and workloads never see the difference.

Cleanup across hosts: every object created on a remote host is created *by its agent*, which
journals it on that host (/run/tunbench/<agent id>/journal.jsonl) the moment it exists. The
local ledger records, per object, an entry of kind "remote" naming the agent and the undo
operation; teardown of a case sends those operations to the live agent (newest first). If the
connection drops, the agent on the host sees EOF and undoes its own journal; if the agent was
killed outright, the next agent's `sweep` (every connect, and `tunbench cleanup --site`)
undoes journals whose owner is dead. So nothing depends on this process surviving.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .. import proc
from ..errors import CommandFailed, UnavailableError
from ..metrics.cpu import CpuRecord, record_from_texts
from ..remote.agent import proccpu
from ..remote.agent.client import Agent, AgentProcess
from ..remote.transport import ConnectionLost
from .base import PrivateMounts, Site
from .ledger import Ledger, register_undo

log = logging.getLogger(__name__)

REMOTE_ROOT = "/run/tunbench"
LOCAL = "local"

# Agents alive in this process, by agent id: how a ledger entry reaches its host.
LIVE_AGENTS: dict[str, Agent] = {}
# Tools found on each host, by (agent id, tool): full path there.
_PATHS: dict[tuple[str, str], str] = {}


@register_undo("remote")
def _undo_remote(e: dict[str, Any]) -> None:
    """Undo an object on a remote host through its agent. An agent that is gone undid its
    journal itself when its connection ended (or the next sweep will): nothing to do here."""
    agent = LIVE_AGENTS.get(e["agent"])
    if agent is None or not agent.alive:
        return
    try:
        agent.call(e["op"], wait=30, **e["args"])
    except ConnectionLost:
        return
    except CommandFailed as exc:
        if any(s in str(exc) for s in ("not started by this agent", "no such",
                                       "not created by tunbench")):
            return   # already gone (stopped by the workload, removed with its directory)
        raise


@register_undo("remote_agent")
def _undo_agent(e: dict[str, Any]) -> None:
    """Close an agent started for a case (in a chain site's namespace, chain/hosts.py): its
    EOF undo stops what it started there, before the namespace itself is deleted (an older
    entry). One that is gone undid its journal itself."""
    agent = LIVE_AGENTS.pop(e["agent"], None)
    if agent is not None:
        agent.close()


# ---- a remote site ------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteSite(Site):
    """A site on another host, reached through its agent."""

    agent: Agent | None = field(default=None, compare=False, repr=False)
    workdir: str = ""          # this case's private directory on that host
    mgmt_if: str = ""          # the interface carrying the SSH session there

    def _agent(self) -> Agent:
        assert self.agent is not None
        return self.agent

    def run(self, argv: list[str], **kw: Any) -> proc.Completed:
        kw.pop("netns", None)
        if "cwd" in kw:
            raise TypeError("cwd is not supported on remote sites")
        return self._agent().run(argv, **kw)

    def run_host(self, argv: list[str], **kw: Any) -> proc.Completed:
        return self.run(argv, **kw)     # the agent runs in its host's own namespaces

    def tcx_attach(self, ifname: str, hook: str, prog_pin: str, link_pin: str) -> None:
        self._agent().call("tcx_attach", ifname=ifname, hook=hook, prog_pin=prog_pin,
                           link_pin=link_pin)

    def tcx_prog_ids(self, ifname: str, hook: str) -> list[int]:
        return [int(i) for i in self._agent().call("tcx_prog_ids", ifname=ifname,
                                                   hook=hook)["ids"]]

    def record_host_object(self, ledger: Ledger, kind: str, **info: Any) -> None:
        """Journaled on the host by its agent (its EOF undo and `cleanup --site` see it),
        and undone from the local ledger through that agent (`host_undo`)."""
        agent = self._agent()
        entry = {"kind": kind, **info}
        agent.call("host_record", entry=entry)
        ledger.add("remote", agent=agent.agent_id, op="host_undo",
                   name=f"{kind} {info.get('path') or info.get('name')}", args={"entry": entry})

    @property
    def links(self) -> AgentLinks:  # type: ignore[override]
        return AgentLinks(self._agent())

    @property
    def where(self) -> str:
        return str(self.host)

    @property
    def remote(self) -> bool:
        return True

    def spawn(self, argv: list[str], workdir: Path, label: str, *,
              env: dict[str, str] | None, split_stderr: bool,
              private: PrivateMounts | None = None) -> proc.Process:
        log_path = str(PurePosixPath(workdir) / f"{label}.log")
        mounts = None if private is None else {
            "tmpfs": list(private.tmpfs), "mkdir": list(private.mkdirs),
            "keep": list(private.keep)}
        p = self._agent().spawn(argv, log_path, env=env, private=mounts,
                                err_path=f"{log_path}.err" if split_stderr else None)
        return RemoteProcess(p, label, split_stderr)  # type: ignore[return-value]

    def read_file(self, path: Path | str) -> bytes:
        return self._agent().read_file(str(path))

    def which(self, tool: str) -> str:
        key = (self._agent().agent_id, tool)
        if key not in _PATHS:
            out = self.run(["sh", "-c", proc.WHICH_SH, "tb-which", tool], timeout=20).stdout
            _PATHS[key] = out.strip()
        if _PATHS[key] in ("", "-"):
            raise UnavailableError(f"required tool '{tool}' is not installed on {self.host}",
                                   f"install it there ({proc.package_for(tool)})")
        return _PATHS[key]

    def adopt_children(self, ledger: Ledger, p: proc.Process, label: str,
                       grace: float = 3.0, settle_titles: tuple[str, ...] = (),
                       settle_timeout: float = 5.0) -> list[int]:
        """Adopted by its agent (op_adopt: the same wait for `settle_titles` on its host)."""
        agent = self._agent()
        found = agent.call("adopt", wait=60.0 + settle_timeout, pid=p.pid, grace=grace,
                           settle_titles=list(settle_titles),
                           settle_timeout=settle_timeout)["processes"]
        for child in found:
            ledger.add("remote", agent=agent.agent_id, op="kill", label=label,
                       args={"pid": child["pid"], "starttime": child["starttime"],
                             "grace": grace})
        return [int(child["pid"]) for child in found]

    def process_gone(self, ledger: Ledger, pid: int) -> str | None:
        """Asked of its agent, which holds it: its exit code once it ended."""
        try:
            code = self._agent().call("poll", pid=pid)["returncode"]
        except ConnectionLost:
            raise
        except CommandFailed:
            return None   # not one the agent started
        return None if code is None else f"exited with code {code}"

    def exists(self, path: Path | str) -> bool:
        return self.run(["test", "-e", str(path)], check=False, timeout=10).ok

    def record_leftover(self, ledger: Ledger, path: Path | str) -> None:
        """Nothing: the agent stops its daemons with SIGTERM and they remove their own."""

    def cpu_sampler(self, interval: float) -> RemoteCpuSampler:
        return RemoteCpuSampler(self._agent(), interval)

    def record_process(self, ledger: Ledger, p: proc.Process, grace: float) -> None:
        ledger.add("remote", agent=self._agent().agent_id, op="stop", label=p.label,
                   args={"pid": p.pid, "grace": grace})

    def record_link(self, ledger: Ledger, ifname: str) -> None:
        ledger.add("remote", agent=self._agent().agent_id, op="link_del", name=ifname,
                   args={"ifname": ifname})

    def record_command(self, ledger: Ledger, argv: list[str],
                       gone: tuple[str, ...] = ()) -> None:
        # the agent's `run` returns the exit code to teardown, which does not judge it
        ledger.add("remote", agent=self._agent().agent_id, op="run", name=" ".join(argv),
                   args={"argv": argv, "timeout": 20})

    def make_dir(self, ledger: Ledger, path: Path) -> None:
        self._agent().mkdir(str(path))   # journaled by the agent; inside the case directory

    @property
    def management_if(self) -> str:
        return self.mgmt_if

    def write_file(self, ledger: Ledger, path: Path, raw: bytes, mode: int = 0o600) -> None:
        # inside the case directory the agent created: removed with it, and by the agent
        self._agent().write_file(str(path), raw, mode=mode)


class RemoteProcess:
    """What workloads and drivers use of proc.Process, for a process the agent started.
    Its log lives on the site: output() reads it over the connection."""

    def __init__(self, p: AgentProcess, label: str, split_stderr: bool = False) -> None:
        self._p = p
        self.split_stderr = split_stderr
        self.label = label
        self.argv = p.argv
        self.starttime = p.starttime
        self.log_path = p.log_path

    @property
    def pid(self) -> int:
        return self._p.pid

    def poll(self) -> int | None:
        return self._p.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._p.wait(timeout)

    def stop(self, grace: float = 3.0) -> int | None:
        try:
            return self._p.stop(grace)
        except CommandFailed as exc:
            if "not started by this agent" in str(exc):
                return None   # stopped before
            raise

    def _read(self, path: str) -> str:
        try:
            return self._p.agent.read_file(path).decode(errors="replace")
        except CommandFailed as exc:
            if "no such file" in str(exc):
                return ""
            raise

    def output(self) -> str:
        return self._read(self.log_path)

    def errors(self) -> str:
        """What it wrote to stderr, when spawned with split_stderr."""
        return self._read(f"{self.log_path}.err") if self.split_stderr else ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join((self.output() + self.errors()).splitlines()[-lines:])


class RemoteCpuSampler:
    """/proc/stat of a remote host, and the CPU time of the processes tracked there (the
    datapath daemons, ksoftirqd), read there by its agent every `interval` (no round trip
    per sample) and fetched at the end of the window. The record has the local sampler's
    shape (metrics.cpu.CpuSampler)."""

    def __init__(self, agent: Agent, interval: float) -> None:
        self.agent = agent
        self.interval = interval
        self.labels: dict[int, str] = {}
        self.kernel_prefix = ""

    def track(self, pid: int, label: str) -> None:
        self.labels[pid] = label

    def track_kernel_threads(self, prefix: str = "ksoftirqd/") -> None:
        self.kernel_prefix = prefix

    def start(self) -> RemoteCpuSampler:
        tracked = self.agent.cpu_start(self.interval, list(self.labels), self.kernel_prefix)
        for pid, comm in tracked.items():
            self.labels.setdefault(int(pid), comm)   # kernel threads: by their name
        return self

    def stop(self) -> CpuRecord:
        return record_from_samples(self.interval, self.agent.cpu_take(stop=True), self.labels)


def record_from_samples(interval: float, samples: list[dict[str, Any]],
                        labels: dict[int, str]) -> CpuRecord:
    """The CPU record of a site from its agent's samples (core.Sampler): CPU per core, and
    each tracked process's entry (`labels`: pid -> label) from its first and its latest
    reading, computed as the local sampler does (remote/agent/proccpu.py)."""
    rec = record_from_texts(interval, [(float(s["time"]), str(s["text"])) for s in samples])
    for pid, label in labels.items():
        seen = [(float(s["mono"]), s["procs"][str(pid)]) for s in samples
                if str(pid) in s.get("procs", {})]
        if seen:
            last = seen[0]
            for t, r in seen[1:]:
                last = (t, proccpu.later(last[1], r))
            rec.processes[f"{label}[{pid}]"] = proccpu.process_entry(seen[0], last)
    return rec


class AgentLinks:
    """Site.links of a remote site: the same methods as netlink.NetnsLinks, through the
    agent's netlink (pyroute2 running on that host)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def add_link(self, ifname: str, kind: str, **attrs: Any) -> None:
        self.agent.link_add(ifname, kind, **attrs)

    def set_link(self, ifname: str, **attrs: Any) -> None:
        self.agent.call("link_set", wait=30, ifname=ifname, attrs=attrs)

    def add_addr(self, ifname: str, cidr: str) -> None:
        self.agent.addr_add(ifname, cidr)

    def delete_link(self, ifname: str) -> None:
        self.agent.link_del(ifname)

    def _link(self, ifname: str) -> dict[str, Any]:
        for link in self.agent.links():
            if link["ifname"] == ifname:
                return link
        raise CommandFailed(f"on {self.agent.conn.target}: no link {ifname}")

    def index(self, ifname: str) -> int:
        return int(self._link(ifname)["index"])

    def names(self) -> list[str]:
        return [str(link["ifname"]) for link in self.agent.links()]

    def mtu(self, ifname: str) -> int:
        return int(self._link(ifname)["mtu"])

    def stats(self, ifname: str) -> dict[str, int]:
        from .netlink import STAT_KEYS
        st = self._link(ifname)["stats"]
        return {k: int(st.get(k, 0)) for k in STAT_KEYS}


