"""`tunbench doctor --site` and `tunbench cleanup --site`: a remote host, over SSH.

doctor: what that host can run and exactly why not — its kernel, python, root, the tools every
tunnel kind and workload declares (missing ones with the install command of *that host's*
distribution), and the kernel options they declare, read from the host's own configuration
(/proc/config.gz or /boot/config-<release>). Read-only: the agent starts (it is how the host
is asked) and leaves nothing behind.

cleanup: connect, and the agent's `sweep` undoes the journals that crashed agents left in
/run/tunbench on that host (objects whose owner is dead); then every agent still running
there is judged by its controller (`controller_gone`): one whose controller is gone is ended
(it undoes its objects), one whose controller lives, or cannot be judged, is left alone.
"""

from __future__ import annotations

import os
from typing import Any

from .. import doctor, proc, tunnels
from ..capabilities import viewing
from ..testbed.topology import AgentView, install_command
from .agent.client import Agent
from .agent.journal import machine_identity
from .transport import Connection, SshOptions


def report(target: str, options: SshOptions | None = None) -> dict[str, Any]:
    with Connection.open(target, options=options, name="doctor") as conn:
        agent = Agent.start(conn, netlink=False)
        try:
            return _report(target, agent)
        finally:
            agent.close()


def _report(target: str, agent: Agent) -> dict[str, Any]:
    h = agent.hello
    rel = agent.run(["cat", "/etc/os-release"], check=False, timeout=10).stdout
    install = install_command(rel)
    tools = doctor.doctor_tools()
    found = agent.run(["sh", "-c", proc.WHICH_SH, "tb-which", *tools], timeout=30).stdout.split()
    missing = {t for t, p in zip(tools, found) if p == "-"}
    conf = agent.kernel_config()
    view = AgentView(target, agent)

    def absent(option: str) -> bool:
        return conf is not None and conf.get(option, "n") not in ("y", "m")

    kinds: dict[str, Any] = {}
    for kind, drv in sorted(tunnels.registry().items()):
        impls: list[str | None] = list(drv.implementations()) or [None]
        rows = {}
        for impl in impls:
            need = drv.declared(impl)
            why = [f"tool {t.name}: not installed ({install} {t.package})"
                   for t in need.tools if t.name in missing]
            why += [f"kernel {k.option}: not set in this kernel's configuration"
                    for k in need.kernel if absent(k.option)]
            why += too_old(drv, str(h.get("kernel", "")))
            rows[impl or kind] = why
        kinds[kind] = {"summary": drv.summary, "available": any(not w for w in rows.values()),
                       "variants": rows if impls != [None] else None,
                       "reasons": rows[kind] if impls == [None] else [],
                       "auto": auto_impl(drv, view) if impls != [None] else None}
    return {
        "format": "tunbench-doctor-site", "format_version": 1, "target": target,
        "hostname": h.get("hostname"), "kernel": h.get("kernel"), "machine": h.get("machine"),
        "python": h.get("python"), "root": int(h.get("euid", -1)) == 0,
        "install_command": install,
        "kernel_config_readable": conf is not None,
        "tools": {t: t not in missing for t in tools},
        "missing_tools": {t: f"{install} {proc.package_for(t)}" for t in tools if t in missing},
        "tunnels": kinds,
    }


def too_old(drv: Any, release: str) -> list[str]:
    """The driver's minimum kernel against that host's release ("6.1.0-13-amd64")."""
    if not drv.min_kernel:
        return []
    try:
        have = tuple(int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        return []
    if have >= drv.min_kernel:
        return []
    need = ".".join(str(x) for x in drv.min_kernel)
    return [f"kernel {release}: Linux >= {need} needed (upgrade that host's kernel)"]


def auto_impl(drv: Any, view: AgentView) -> str:
    """What impl=auto (datapath=auto) chooses on that host alone: the driver's own choice,
    asked of that host's kernel and tools (a run between two hosts also needs the other
    to agree, see implchoice)."""
    with viewing(view):
        return str(drv.resolve_impl(drv.default_params()))


def format_table(doc: dict[str, Any]) -> str:
    lines = [f"{doc['target']} ({doc['hostname']}): kernel {doc['kernel']} {doc['machine']}, "
             f"python {doc['python']}, root: {'yes' if doc['root'] else 'NO'}"]
    if not doc["kernel_config_readable"]:
        lines.append("  kernel configuration not readable there: kernel options not checked")
    lines += ["", "tunnel kinds:"]
    width = max(len(k) for k in doc["tunnels"]) + 2
    for kind, e in doc["tunnels"].items():
        auto = f" [auto: {e['auto']}]" if e.get("auto") else ""
        lines.append(f"  {kind:<{width}}{'yes' if e['available'] else 'NO ':<5}{e['summary']}"
                     f"{auto}")
        for r in e["reasons"]:
            lines.append(f"  {'':<{width}}     - {r}")
        for impl, why in (e["variants"] or {}).items():
            lines.append(f"  {'':<{width}}  {impl:<22}{'no' if why else 'yes'}")
            for r in why:
                lines.append(f"  {'':<{width}}      - {r}")
    if doc["missing_tools"]:
        lines += ["", "missing tools (install there):"]
        for tool, cmd in doc["missing_tools"].items():
            lines.append(f"  {tool:<16}{cmd}")
    return "\n".join(lines)


def cleanup(target: str, options: SshOptions | None = None
            ) -> tuple[list[str], list[str]]:
    """Undo what crashed tunbench agents left on the host (their journals), and end the
    agents still running there whose controller is gone. Returns (removed, kept): what was
    undone, and one line per live run left alone."""
    with Connection.open(target, options=options, name="cleanup") as conn:
        agent = Agent.start(conn, netlink=True)
        try:
            removed, kept = agent.sweep(), []
            here = machine_identity()
            for other in agent.call("agents", wait=30)["agents"]:
                gone = controller_gone(other, here)
                name = os.path.basename(str(other["state"]))
                if gone is None:
                    kept.append(f"{name}: {controller_alive_line(other)}")
                    continue
                undone = agent.call("end_agent", wait=90, state=other["state"])["undone"]
                removed += [f"{line} ({gone})" for line in undone] or [f"{name} ({gone})"]
            return removed, kept
        finally:
            agent.close()


def controller_gone(other: dict[str, Any], here: dict[str, str]) -> str | None:
    """Why a live agent's controller is gone, or None when it lives or cannot be judged.
    Its controller ran on this machine (same boot id, machine id and PID namespace): its PID
    and start time say. Elsewhere: a heartbeat (recorded timeout) older than twice its
    timeout means the agent's own watchdog failed too, so the run is dead; an agent without
    a heartbeat whose controller is on another machine is left alone."""
    ctl = other.get("controller")
    if not isinstance(ctl, dict):
        return None
    same = all(ctl.get(k) and ctl.get(k) == here.get(k) for k in ("boot_id", "machine_id",
                                                                   "pidns"))
    if same:
        pid, start = int(ctl.get("pid", 0)), ctl.get("starttime")
        if pid and not proc.pid_alive(pid, start):
            return f"its controller, PID {pid} on this machine, is gone"
        return None
    beat, age = float(ctl.get("heartbeat_s") or 0), other.get("beat_age")
    if beat > 0 and age is not None and float(age) > 2 * beat:
        return f"no heartbeat from its controller for {age:g}s (timeout {beat:g}s)"
    return None


def controller_alive_line(other: dict[str, Any]) -> str:
    ctl = other.get("controller")
    if not isinstance(ctl, dict):
        return "a run whose controller is not recorded: left alone"
    where = f"PID {ctl.get('pid')} on {ctl.get('hostname')}"
    if float(ctl.get("heartbeat_s") or 0) > 0 and other.get("beat_age") is not None:
        return f"a live run (controller {where}, heartbeat {other['beat_age']:g}s ago): left alone"
    return f"a run of controller {where}, on another machine without a heartbeat: left alone"
