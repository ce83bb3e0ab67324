"""`tunbench prepare --site USER@HOST ...`: install on each host what the chosen tunnel kinds
and workloads need, with that host's own package manager (apt-get, dnf), after printing the
plan. `--dry-run` only prints it; `--yes` skips the question. Nothing else is installed or
configured: the packages are those of the tools `doctor --site` finds missing there (every
tool tunbench knows when no kind or workload is named), nothing more.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import doctor, proc, tunnels, workloads
from ..errors import CommandFailed, SpecError, TunbenchError, UnavailableError
from ..testbed.topology import BASE_TOOLS, install_command
from .agent.client import Agent
from .transport import Connection, SshOptions, check_target

# package managers prepare drives: os-release ID/ID_LIKE -> manager
MANAGERS = {"debian": "apt", "ubuntu": "apt", "fedora": "dnf", "rhel": "dnf", "centos": "dnf",
            "rocky": "dnf", "almalinux": "dnf"}
# Debian package names (proc.package_for) that are called otherwise on dnf distributions
DNF_NAMES = {"iproute2": "iproute", "iputils-ping": "iputils", "procps": "procps-ng",
             "openssh-client": "openssh-clients", "openvswitch-switch": "openvswitch",
             "openssh-server": "openssh-server"}
INSTALL_TIMEOUT = 1800.0


@dataclass
class HostPlan:
    target: str
    manager: str                     # "apt", "dnf", or "" (not one prepare drives)
    install: str                     # the distribution's install command, for the hint
    missing: dict[str, str] = field(default_factory=dict)    # tool -> package
    problem: str = ""                # why nothing can be installed there

    @property
    def packages(self) -> list[str]:
        return list(dict.fromkeys(self.missing.values()))

    def argv(self) -> list[str]:
        if self.manager == "apt":
            return ["apt-get", "install", "-y", "--no-install-recommends", *self.packages]
        return ["dnf", "install", "-y", *self.packages]

    def line(self) -> str:
        if self.problem:
            return f"{self.target}: {self.problem}"
        if not self.missing:
            return f"{self.target}: nothing to install"
        return (f"{self.target}: {' '.join(self.argv())}   "
                f"(for {', '.join(sorted(self.missing))})")


def wanted_tools(kinds: list[str], loads: list[str]) -> list[str]:
    """The tools to have on each host: those of the kinds (every implementation) and the
    workloads named; with neither, every tool `doctor --site` checks. Unknown names are bad
    input (one line, before any connection)."""
    if not kinds and not loads:
        return doctor.doctor_tools()
    known_kinds, known_loads = tunnels.registry(), workloads.registry()
    for k in kinds:
        if k not in known_kinds:
            raise SpecError(f"unknown tunnel kind {k!r}",
                            f"known kinds: {', '.join(sorted(known_kinds))}")
    for w in loads:
        if w not in known_loads:
            raise SpecError(f"unknown workload {w!r}",
                            f"known workloads: {', '.join(sorted(known_loads))}")
    out: list[str] = list(BASE_TOOLS)
    for k in kinds:      # declared() with no impl: every implementation's needs
        out += [t.name for t in known_kinds[k].declared().tools]
    for w in loads:
        out += list(workloads.get(w).tools)
    return list(dict.fromkeys(out))


def plan_host(target: str, agent: Agent, tools: list[str]) -> HostPlan:
    """What is missing on the host behind `agent`, and how its package manager installs it."""
    rel = agent.run(["cat", "/etc/os-release"], check=False, timeout=10).stdout
    ids = [v.strip().strip('"') for line in rel.splitlines()
           for key, _, v in [line.partition("=")] if key in ("ID", "ID_LIKE")]
    ids = [w for v in ids for w in v.split()]
    manager = next((MANAGERS[i] for i in ids if i in MANAGERS), "")
    plan = HostPlan(target, manager, install_command(rel))
    found = agent.run(["sh", "-c", proc.WHICH_SH, "tb-which", *tools], timeout=30).stdout.split()
    for tool, path in zip(tools, found):
        if path == "-":
            pkg = proc.package_for(tool)
            plan.missing[tool] = DNF_NAMES.get(pkg, pkg) if manager == "dnf" else pkg
    if plan.missing and not manager:
        plan.problem = (f"prepare drives apt-get and dnf only; install by hand there: "
                        f"{plan.install} {' '.join(plan.packages)}")
    elif plan.missing and int(agent.hello.get("euid", -1)) != 0:
        plan.problem = "tunbench logs in without root there: cannot install (use root@HOST)"
    return plan


def prepare(targets: list[str], options: SshOptions, kinds: list[str], loads: list[str], *,
            yes: bool = False, dry_run: bool = False, say: Callable[[str], None] = print,
            ask: Callable[[str], str] | None = None) -> int:
    """Print the plan for every host, then (unless dry_run) install after a yes. Exit code."""
    for t in targets:
        check_target(t)
    tools = wanted_tools(kinds, loads)
    opened: list[tuple[Connection, Agent]] = []
    try:
        plans = []
        for i, target in enumerate(targets):
            conn = Connection.open(target, options=options, name=f"prepare{i}")
            try:
                agent = Agent.start(conn, netlink=False)
            except BaseException:
                conn.close()
                raise
            opened.append((conn, agent))
            plans.append(plan_host(target, agent, tools))
        say("plan:")
        for p in plans:
            say(f"  {p.line()}")
        todo = [(p, a) for p, (_, a) in zip(plans, opened) if p.missing]
        if dry_run or not todo:
            return 0
        bad = [p for p, _ in todo if p.problem]
        if bad:
            raise UnavailableError(f"cannot install on {bad[0].line()}",
                                   "nothing was installed on any host")
        if not yes:
            answer = _ask(ask, f"install on {len(todo)} host(s)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                say("nothing installed")
                return 1
        for p, agent in todo:
            _install(p, agent, say)
        left = [p.target + ": " + ", ".join(t for t in p.missing if t not in
                                           _present(agent, list(p.missing)))
                for p, agent in todo if set(p.missing) - _present(agent, list(p.missing))]
        if left:
            raise UnavailableError(f"still missing after installing: {'; '.join(left)}",
                                   "check the package manager's output above")
        say("prepared: " + ", ".join(p.target for p, _ in todo))
        return 0
    finally:
        for conn, agent in opened:
            agent.close()
            conn.close()


def _ask(ask: Callable[[str], str] | None, question: str) -> str:
    if ask is not None:
        return ask(question)
    if not sys.stdin.isatty():
        raise SpecError("prepare would install packages but has no terminal to ask",
                        "add --yes to install, or --dry-run to only print the plan")
    return input(question)


def _install(p: HostPlan, agent: Agent, say: Callable[[str], None]) -> None:
    say(f"{p.target}: {' '.join(p.argv())}")
    env = {"DEBIAN_FRONTEND": "noninteractive"} if p.manager == "apt" else None
    try:
        r = agent.run(p.argv(), timeout=INSTALL_TIMEOUT, check=False, env=env)
    except CommandFailed as exc:
        raise TunbenchError(f"{p.target}: {exc.message}", "nothing else was changed") from None
    for line in (r.stdout + r.stderr).strip().splitlines()[-5:]:
        say(f"  {line}")
    if not r.ok:
        hint = "run `apt-get update` there, then prepare again" if p.manager == "apt" and \
            "Unable to locate" in r.stderr else "see the package manager's output above"
        raise TunbenchError(f"{p.target}: {p.argv()[0]} failed (exit {r.returncode})", hint)


def _present(agent: Agent, tools: list[str]) -> set[str]:
    found = agent.run(["sh", "-c", proc.WHICH_SH, "tb-which", *tools], timeout=30).stdout.split()
    return {t for t, path in zip(tools, found) if path != "-"}

