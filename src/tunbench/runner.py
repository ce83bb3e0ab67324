"""Executes a campaign: preflight, then each case on a fresh testbed, results written as it goes.

Every case builds its own testbed and tunnel under its own ledger, so whatever happens (error,
SIGINT, SIGTERM) the ledger undoes it before the next case starts. A failed case is recorded
with its reason and the log tails of its processes, and the campaign goes on. An interrupted
campaign can be resumed: cases already recorded are kept as they are.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import implchoice, interrupts, lanes, pathmtu, proc, topologies, tunnels, workloads
from .capabilities import Missing, kernel_missing, root_missing
from .caserecord import tunnel_identity, workload_identity
from .chain import hops as chain_hops
from .errors import CommandFailed, Interrupted, SpecError, TunbenchError, UnavailableError
from .metrics import tcpstat
from .metrics.cpu import CpuRecord
from .plan import Case, next_round, plan
from .progress import SETUP, TEARDOWN, CasePlan, PhaseEvent, ProgressSink, ignore
from .results import envinfo, fingerprint
from .results.model import MetricRecord, case_document
from .results.store import CampaignStore
from .spec import OFFLOAD_LONG_NAMES, Experiment
from .testbed import local, names, netlink, sitecores, topology
from .testbed.base import Site, Testbed
from .testbed.hubhosts import HubHosts
from .testbed.ledger import Ledger
from .tunnels.base import Endpoints
from .watch import DatapathWatch
from .workloads.base import Context, Metric, Output

if TYPE_CHECKING:
    from .sequential import Key as SeqKey


class CaseSkipped(Exception):
    """The workload cannot run over this tunnel (e.g. UDP over a TCP stream relay)."""


class Reporter(Protocol):
    """Told what the campaign does, in order; `phase` between a case's start and end (from the
    runner and from inside the workload). It only listens: nothing flows back."""
    def campaign_start(self, cases: list[Case], plans: list[CasePlan]) -> None: ...
    def case_start(self, case: Case) -> None: ...
    def phase(self, event: PhaseEvent) -> None: ...
    def case_end(self, case: Case, doc: dict[str, Any]) -> None: ...
    def campaign_end(self, store: CampaignStore) -> None: ...
    # optional (the sequential design; called only when the reporter has them):
    # round_end(rnd: int, open_pairs: str, stop: str | None) after each decision, and
    # round_start(rnd, cases, plans) before each added round


class SilentReporter:
    def campaign_start(self, cases: list[Case], plans: list[CasePlan]) -> None: ...
    def case_start(self, case: Case) -> None: ...
    def phase(self, event: PhaseEvent) -> None: ...
    def case_end(self, case: Case, doc: dict[str, Any]) -> None: ...
    def campaign_end(self, store: CampaignStore) -> None: ...


def preflight(exp: Experiment) -> None:
    """Everything this experiment needs that the host lacks, all at once, before any change.
    With sites on real hosts, what each host needs is checked there once connected (the
    topology's `open`, open_topology); here only what this host itself does, the topology's
    own `requirements` included."""
    missing: list[str] = []
    root = root_missing()
    if root:
        missing.append(root.one_line())
    if exp.sites:
        if any(not s.local for s in exp.sites.values()):
            for t in exp.tunnels:
                drv = tunnels.get(t.kind)
                if drv.not_on_hosts:
                    missing.append(f"tunnel {t.label}: cannot run on sites over SSH: "
                                   f"{drv.not_on_hosts}")
                for m in drv.orchestrator_requirements(t.params):
                    missing.append(f"tunnel {t.label}: {m.one_line()} (on this host: it is "
                                   "copied to the sites)")
        _inner_mtu_problems(exp, missing)
        _raise_missing(missing)
        return
    for t in exp.tunnels:
        drv = tunnels.get(t.kind)
        for m in drv.requirements(t.params):   # named with its implementation
            missing.append(f"tunnel {drv.display(t.params, t.label)}: {m.one_line()}")
    for w in exp.workloads:
        for m in workloads.get(w.name).requirements(w.params):
            missing.append(f"workload {w.name}: {m.one_line()}")
    if exp.cpus_per_site:   # a cpuset cgroup per site (testbed/sitecores.py)
        cores_missing = sitecores.missing()
        if cores_missing:
            missing.append(cores_missing)
    if exp.netem is not None:
        netem_missing = kernel_missing("CONFIG_NET_SCH_NETEM", "netem WAN emulation (--delay, "
                                       "--jitter, --loss, --netem-rate)", "sch_netem")
        if netem_missing:
            missing.append(netem_missing.one_line())
    for tool in ("ip", "ping", "ethtool", "sysctl") + (("tc",) if exp.shaped else ()):
        if not proc.which(tool):
            missing.append(f"tool {tool}: not installed (apt-get install "
                           f"{proc.package_for(tool)})")
    missing += topologies.of(exp).requirements(exp)   # on hosts: asked of them (its open)
    _inner_mtu_problems(exp, missing)
    _raise_missing(missing)


def _inner_mtu_problems(exp: Experiment, missing: list[str]) -> None:
    for t in exp.tunnels:
        for mtu in exp.all_mtus():
            inner = tunnels.get(t.kind).tunnel_mtu(t.params, mtu)
            if inner < 1280 and exp.family == 6 or inner < 576:
                missing.append(f"tunnel {t.label}: underlay MTU {mtu} leaves only {inner} bytes "
                               "inside the tunnel (raise the MTU)")


def open_topology(exp: Experiment) -> topology.Topology | HubHosts | None:
    """Connect to the experiment's sites (None: the local testbed) and check them, before
    anything is changed on any host: the experiment's topology opens them (its `open`)."""
    if not exp.sites:
        return None
    cfg = Path(os.path.expanduser(exp.ssh_config)) if exp.ssh_config else None
    return topologies.of(exp).open(exp, topology.SshOptions(config_file=cfg,
                                                            heartbeat=exp.heartbeat))


def _raise_missing(missing: list[str]) -> None:
    if missing:
        uniq = list(dict.fromkeys(missing))
        if len(uniq) == 1:  # one problem: one line
            raise UnavailableError(f"cannot run this experiment here: {uniq[0]}",
                                   "nothing was changed")
        raise UnavailableError("cannot run this experiment here:\n  " + "\n  ".join(uniq),
                               "fix the above or leave those out; nothing was changed")


def case_plans(exp: Experiment, cases: list[Case],
               alongside: frozenset[str] = frozenset()) -> list[CasePlan]:
    """What the estimate starts from: each case's kind, workload and the workload's expected
    seconds (bring-up and teardown are the estimate's to learn); `alongside`: the ids of
    cases that run beside another one (a lane after the first, lanes.py), which take no time
    of their own."""
    # a hub case measures twice (one spoke, then all spokes at once): its topology says so
    return [CasePlan(c.tunnel.kind, c.workload.name,
                     topologies.of(exp, c.through_chain).measurements(exp)
                     * workloads.get(c.workload.name).expected_seconds(
                         c.workload.params, exp.duration, exp.warmup),
                     alongside=c.case_id in alongside)
            for c in cases]


def _alongside(steps: list[list[list[Case]]]) -> frozenset[str]:
    """The cases of every lane after a step's first (they run beside its cases)."""
    return frozenset(c.case_id for step in steps for lane in step[1:] for c in lane)


@dataclass
class CampaignOutcome:
    store: CampaignStore
    statuses: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [c for c, s in self.statuses.items() if s == "failed"]


def run_campaign(exp: Experiment, out_dir: Path, reporter: Reporter | None = None,
                 resume: bool = False) -> CampaignOutcome:
    reporter = reporter or SilentReporter()
    preflight(exp)
    cases = plan(exp)
    store = CampaignStore(out_dir)
    done: dict[str, str] = {}
    if resume:
        recorded = store.read_index()
        if recorded.get("experiment") != exp.to_dict():
            raise SpecError(f"{out_dir} was recorded with a different experiment",
                            "resume with the same options, or start a new --out folder")
        kept = recorded_cases(recorded["cases"], store)
        done = resume_done(exp, cases, kept)
        retried = {cid: _earlier_error(store, cid) for cid in kept if cid not in done}
        # sequential: the rounds it added after the planned ones, as far as they were
        # recorded (the rest of a round cut short is left; the next round starts fresh)
        added = [c for c in recorded["cases"][len(cases):] if c["id"] in kept] \
            if exp.sequential else []
    else:
        added, retried = [], {}
    if not resume and store.index_path.exists():
        raise SpecError(f"{out_dir} already holds a campaign",
                        "use --resume to continue it, or choose another --out folder")
    env = envinfo.host_env()
    index: dict[str, Any] = {
        "experiment": exp.to_dict(), "env": env, "created": time.time(),
        "fingerprint": fingerprint.derive(exp.to_dict(), env),
        "cases": [{"id": c.case_id, "status": done.get(c.case_id, "pending"),
                   "file": f"cases/{c.case_id}.json", **_case_keys(c)} for c in cases]
        + added,
        "state": "running",
    }
    if resume and recorded.get("sequential"):
        index["sequential"] = recorded["sequential"]
    store.write_index(index)
    todo = [c for c in cases if c.case_id not in done]
    topo = open_topology(exp)
    try:
        return _run_cases(exp, store, index, todo, done, reporter, topo, retried)
    finally:
        if topo is not None:
            topo.close()


def recorded_cases(cases: list[dict[str, Any]], store: CampaignStore) -> dict[str, str]:
    """The cases of a campaign's index that ran to an end (ok, failed, skipped) and whose
    file is there: id -> status. A case whose file is gone (deleted, or removed because it
    was damaged) is not among them: it runs again."""
    return {c["id"]: c["status"] for c in cases
            if c["status"] in ("ok", "failed", "skipped") and store.case_path(c["id"]).exists()}


def resume_done(exp: Experiment, cases: list[Case], recorded: dict[str, str]
                ) -> dict[str, str]:
    """What `--resume` keeps of the recorded cases: all of them, except a failed case of a
    topology whose failures are rerun (`resume_reruns_failed`: the mesh, where a failed pair
    is a hole in its grid), which runs again with the missing ones."""
    rerun = {c.case_id for c in cases if recorded.get(c.case_id) == "failed"
             and topologies.of(exp, c.through_chain).resume_reruns_failed}
    return {cid: st for cid, st in recorded.items() if cid not in rerun}


def _earlier_error(store: CampaignStore, case_id: str) -> str:
    try:
        doc = json.loads(store.case_path(case_id).read_text(encoding="utf-8"))
        return str(doc.get("error") or "no reason recorded")
    except Exception as exc:   # a damaged file: the case runs again all the same
        return f"its file could not be read ({type(exc).__name__})"


def _run_cases(exp: Experiment, store: CampaignStore, index: dict[str, Any], todo: list[Case],
               done: dict[str, str], reporter: Reporter,
               topo: topology.Topology | HubHosts | None,
               retried: dict[str, str] | None = None) -> CampaignOutcome:
    steps = topologies.of(exp).steps(exp, todo)
    reporter.campaign_start(todo, case_plans(exp, todo, _alongside(steps)))
    outcome = CampaignOutcome(store, dict(done))
    try:
        _run_steps(exp, store, index, steps, outcome, reporter, topo, retried or {})
        if exp.sequential:
            _more_rounds(exp, store, index, outcome, reporter, topo)
    except Interrupted:
        index["state"] = "interrupted"
        store.write_index(index)
        raise
    index["state"] = "complete"
    index["finished"] = time.time()
    store.write_index(index)
    reporter.campaign_end(store)
    return outcome


def _run_steps(exp: Experiment, store: CampaignStore, index: dict[str, Any],
               steps: list[list[list[Case]]], outcome: CampaignOutcome, reporter: Reporter,
               topo: topology.Topology | HubHosts | None, retried: dict[str, str]) -> None:
    """The topology's steps one after another: a step of one lane here, case after case; a
    step of several lanes (the mesh's pairs of one colour on hosts, with parallel = true)
    at the same time, one thread per lane (lanes.py), each its cases in order."""
    for step in steps:
        if len(step) == 1:
            for case in step[0]:
                _run_one(exp, store, index, case, outcome, reporter, topo,
                         retried.get(case.case_id))
            continue
        lanes.run_lanes(step, reporter, lambda case, view: _run_one(
            exp, store, index, case, outcome, view, topo, retried.get(case.case_id),
            lane=True))


# a case's file, index.json and the reporter's case_end, one case at a time (lanes.py)
_BOOKS = threading.Lock()
_RUN_IDS: set[str] = set()   # the run ids this process gave its cases


def _run_one(exp: Experiment, store: CampaignStore, index: dict[str, Any], case: Case,
             outcome: CampaignOutcome, reporter: Reporter,
             topo: topology.Topology | HubHosts | None,
             earlier: str | None = None, lane: bool = False) -> None:
    """One case and its record. `lane`: it runs beside other cases (lanes.py), so only its
    own sites are healed after it (the others' connections are in use by their lanes)."""
    if topo is not None and topo.impls:   # impl=auto as the sites decided
        case = dataclasses.replace(case, tunnel=implchoice.apply(case.tunnel, topo.impls))
    reporter.case_start(case)
    doc = run_case(exp, case, reporter.phase, topo)
    if earlier is not None:   # a failed case run again by --resume: its first reason stays
        doc.setdefault("notes", []).append(f"run again by --resume; it had failed: {earlier}")
    unreachable = _heal(topo, doc, case.pair if lane else None)
    interrupts.check()   # a signal whose exception a library swallowed: not recorded
    with _BOOKS:
        store.write_case(case.case_id, doc)
        outcome.statuses[case.case_id] = doc["status"]
        index["cases"][case.index]["status"] = doc["status"]
        store.write_index(index)
        reporter.case_end(case, doc)
        if unreachable is not None:   # recorded the case that lost it; stop here
            index["state"] = "stopped"
            store.write_index(index)
    if unreachable is not None:
        raise unreachable


def _more_rounds(exp: Experiment, store: CampaignStore, index: dict[str, Any],
                 outcome: CampaignOutcome, reporter: Reporter,
                 topo: topology.Topology | HubHosts | None) -> None:
    """The sequential design after its planned rounds: decide on what is recorded
    (sequential.py), record the state in index.json, add a round of the cases it keeps,
    until it says stop."""
    from . import sequential as seq
    state = index.get("sequential") or {}
    history: list[dict[str, Any]] = list(state.get("history") or [])
    while True:
        obs = seq.series_from_docs(store.read_cases())
        rankings = [seq.rank(s) for s in obs.series]
        step = seq.next_step(rankings, obs.rounds, obs.measured_s, obs.case_s(),
                             min_rounds=exp.planned_rounds, max_rounds=exp.max_rounds,
                             budget_s=exp.budget)
        opened = seq.unsettled(rankings, step)
        if not history or history[-1].get("round") != obs.rounds:
            history.append({"round": obs.rounds, "measured_s": round(obs.measured_s, 3),
                            "open_pairs": len(opened),
                            "open": [[p["a"], p["b"], p["workload"]] for p in opened],
                            "out_of_reach": [[p["a"], p["b"], p["workload"]] for p in opened
                                             if p["out_of_reach"]],
                            "cases": sum(1 for c in index["cases"]
                                         if c.get("repeat") == obs.rounds)})
        index["sequential"] = seq.record(rankings, step, obs.measured_s,
                                         min_rounds=exp.planned_rounds,
                                         max_rounds=exp.max_rounds, budget_s=exp.budget,
                                         history=history, case_s=obs.case_s())
        store.write_index(index)
        said = getattr(reporter, "round_end", None)
        if said is not None:
            said(obs.rounds, seq.open_text(rankings), step.stop)
        if step.stop is not None:
            return
        cases = next_round(exp, obs.rounds + 1, len(index["cases"]),
                           functools.partial(_kept, step.keep))
        if not cases:   # nothing of what is open can be planned again: stop as settled
            return
        index["cases"] += [{"id": c.case_id, "status": "pending",
                            "file": f"cases/{c.case_id}.json", **_case_keys(c)}
                           for c in cases]
        store.write_index(index)
        steps = topologies.of(exp).steps(exp, cases)
        start = getattr(reporter, "round_start", None)
        if start is not None:
            start(obs.rounds + 1, cases, case_plans(exp, cases, _alongside(steps)))
        _run_steps(exp, store, index, steps, outcome, reporter, topo, {})


def _kept(keep: frozenset[SeqKey] | None, case: Case) -> bool:
    """Whether the sequential rule keeps this case for the next round (None: all)."""
    from .sequential import case_key
    return keep is None or case_key({"case": case.to_dict()}) in keep


def _heal(topo: topology.Topology | HubHosts | None, doc: dict[str, Any],
          sites: tuple[str, str] | None = None) -> TunbenchError | None:
    """After a case on hosts: reconnect every site whose connection dropped (that case failed
    with the reason; the new agent sweeps the host) so the campaign goes on, noted in the
    case. A host that stays unreachable: its connect error, to end the campaign with.
    `sites`: only these (a lane's pair, the mesh's MeshHosts.heal_sites)."""
    if topo is None:
        return None
    try:
        hosts: Any = topo
        healed = hosts.heal() if sites is None else hosts.heal_sites(sites)
    except TunbenchError as exc:
        doc.setdefault("notes", []).append(f"campaign stopped: {exc.one_line()}")
        return exc
    if healed:
        doc.setdefault("notes", []).append(
            "reconnected to site(s) " + ", ".join(healed) + " after this case")
    return None


def _case_keys(c: Case) -> dict[str, Any]:
    return {"tunnel": c.tunnel.label, "kind": c.tunnel.kind, "workload": c.workload.name,
            "workload_label": c.workload.label, "mtu": c.mtu, "offloads": c.offloads.name, "repeat": c.repeat,
            **({"pair": list(c.pair)} if c.pair else {}),
            **({"cpus_per_site": c.cpus} if c.cpus else {}),
            **({"rtt": c.rtt} if c.rtt else {}), **({"loss": c.loss} if c.loss else {}),
            **({"rate": c.rate} if c.rate else {})}


def run_case(exp: Experiment, case: Case, progress: ProgressSink = ignore,
             topo: topology.Topology | HubHosts | None = None) -> dict[str, Any]:
    """One case on a fresh testbed, built by the one topology the case runs on
    (topologies.of: two namespaces here or `topo`'s hosts, a chain, a mesh's pair, a hub and
    its spokes); always torn down; never raises except Interrupted. `progress` hears each
    phase as it starts (bring-up, the workload's own, teardown). A two-site testbed is
    measured here (the tunnel driver's `up` between sites a and b, then the workload); a
    topology that measures itself (the hub) through its own `measure` and `record`."""
    shape = topologies.of(exp, case.through_chain)
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    with _BOOKS:   # cases running beside each other (lanes.py) never share a run id
        run_id = names.new_run_id(taken | _RUN_IDS)
        _RUN_IDS.add(run_id)
    ledger = Ledger(run_id)
    started = time.time()
    built: Any = None
    tb: Testbed | None = None
    ep: Endpoints | None = None
    out = Output()
    ctx: Context | None = None
    status, error, error_log = "ok", None, None
    counters: dict[str, Any] | None = None
    offloads: dict[str, Any] | None = None
    watch: DatapathWatch | None = None
    hopwatch: chain_hops.HopWatch | None = None
    path_mtu: dict[str, Any] | None = None     # the DF probes (none for a stream relay)
    tcp: dict[str, dict[str, int]] | None = None   # each site's TCP counters' delta (tcpstat)
    case_notes: list[str] = []
    try:
        progress(PhaseEvent(SETUP, shape.setup_text(exp, case, topo)))
        built = shape.build(exp, case, run_id, ledger, topo)
        if shape.measures_itself:
            shape.measure(exp, case, built, progress)
        else:
            tb = built
            sitecores.place(tb, case.cpus, exp.placement,
                            {n: s.cpus for n, s in exp.sites.items()}, exp.cpus_per_site)
            driver = tunnels.get(case.tunnel.kind)()
            # a kind that carries one inner family only (sit: IPv6) is measured with that one
            family = exp.family if exp.family in driver.inner_families else driver.inner_families[0]
            if family != exp.family:
                case_notes.append(f"{case.tunnel.kind} carries only IPv{family} inside: "
                                  f"measured with inner IPv{family}")
            ep = driver.up(tb, case.tunnel.params)
            if not ep.relay:
                progress(PhaseEvent(SETUP, f"ping through the {case.tunnel.kind} tunnel",
                                    site=tb.a.name, host=tb.a.host))
                wait_reachable(tb, ep, family)
                # DF probes at the tunnel MTU and a byte above (pathmtu.py), in the same phase
                path_mtu = pathmtu.probe(tb.a, str(ep.b4 if family == 4 else ep.b6), family,
                                         ep.mtu)
                case_notes += [n for n in [pathmtu.note(path_mtu)] if n]
            offloads = {"before": record_offloads(tb, ep)}
            if case.offloads.settings:
                offloads["requested"] = apply_offloads(tb, ep, case.offloads.settings,
                                                       offloads["before"])
                offloads["applied"] = record_offloads(tb, ep)
            before = driver.counters(tb, ep)
            ctx = Context(tb, ep, exp.duration, exp.warmup, family,  # type: ignore[arg-type]
                          cpu_interval=exp.cpu_interval, progress=progress,
                          wire_tx=functools.partial(driver.wire_tx, tb, ep),
                          native_beside=(tb.b.underlay4 if family == 4 else tb.b.underlay6)
                          if native_beside(exp, case, shape, driver,
                                           any(s.remote for s in tb.sites())) else None)
            wl = workloads.get(case.workload.name)()
            why = wl.unsupported(ctx, case.workload.params)
            if why:
                raise CaseSkipped(f"{case.workload.name} over {case.tunnel.kind}: {why}")
            if "chain" in tb.notes:   # per-hop figures: idle probe, counters around the workload
                hopwatch = chain_hops.HopWatch(tb)
                hopwatch.start()
            watch = DatapathWatch(ep, ledger, {s.name: s for s in tb.sites()})
            tcp_before = {s.name: tcpstat.read(s) for s in (tb.a, tb.b)}
            with watch:
                out = wl.run(ctx, case.workload.params)
                tcp = {s.name: tcpstat.delta(tcp_before[s.name], tcpstat.read(s))
                       for s in (tb.a, tb.b)}
                if hopwatch is not None:
                    hopwatch.stop()
                after = driver.counters(tb, ep)
                if not watch.problem:   # traffic after the case's figures (native beside it)
                    wl.after_window(ctx, case.workload.params, out)
            if watch.problem:
                raise CommandFailed(watch.problem, "see the case's error_log (daemon log)")
            counters = {"before": before, "after": after, "delta": _delta(before, after)}
            offloads["after"] = record_offloads(tb, ep)
    except Interrupted:
        raise
    except CaseSkipped as exc:
        status, error = "skipped", str(exc)
    except TunbenchError as exc:
        interrupts.check()   # the error may be a signal's exception turned into another
        status, error = "failed", exc.one_line() + _vanished(tb)
        if watch is not None and watch.problem:   # the cause, not the workload's symptom
            error = f"{watch.problem} (see the case's error_log)"
        error_log = shape.log_tails(built, topo)
    except Exception as exc:  # netlink errors and anything unforeseen: record, go on
        interrupts.check()
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        error_log = shape.log_tails(built, topo)
    finally:
        _announce(progress, PhaseEvent(TEARDOWN))
        undo_errors = ledger.close()
        # Safety net: anything of this run id the ledger did not hear of (a signal landed
        # between creating an object and recording it).
        undo_errors += [f"swept leftover {x}" for x in local.sweep(run_id)]
    notes = case_notes + list(out.notes)
    if undo_errors:
        notes += [f"teardown: {e}" for e in undo_errors]
    if shape.measures_itself:
        parts = shape.record(exp, case, built)
    else:
        metrics = {k: metric_record(k, m) for k, m in out.metrics.items()}
        cpu = None
        if ctx is not None and ctx.cpu_record is not None:
            cpu = cpu_summary(ctx.cpu_record, ctx.warmup)
            metrics.update(_cpu_metrics(cpu, out))
        spurious = tcpstat.spurious_pct(tcp) if tcp and "retransmits" in out.metrics else None
        if spurious is not None:
            metrics["spurious_retransmits"] = MetricRecord(
                "spurious_retransmits", spurious, "% of retransmitted segments", False)
        parts = {"testbed": tb.describe() if tb else None,
                 "tunnel": ep.describe() if ep else None, "metrics": metrics,
                 "series": out.series, "cpu": cpu, "counters": counters, "raw": out.raw,
                 "offloads": offloads, "sections": shape.sections(exp, case)}
    sections = parts.pop("sections")
    doc = case_document(
        case={**case.to_dict(), "tunnel": tunnel_identity(case),
              "workload": workload_identity(case), "run_id": run_id},
        status=status, started=started, ended=time.time(), notes=notes, error=error,
        error_log=error_log, **parts)
    if hopwatch is not None:
        doc["chain"] = hopwatch.describe()   # additive: readers without chains ignore it
    if path_mtu is not None:
        doc["path_mtu"] = path_mtu           # additive, as `chain`
    if tcp is not None:
        doc["tcp_counters"] = tcp            # additive, as `chain`
    if out.paired_native:
        doc["paired_native"] = out.paired_native   # additive: model.own_share reads it
    doc.update(sections)                     # additive: the mesh's `mesh`, the hub's `hub`
    return doc


def native_beside(exp: Experiment, case: Case, shape: type[topologies.Topology],
                  driver: Any, remote: bool = False) -> bool:
    """Whether the case measures native beside the method (Context.native_beside, to the
    server site's underlay address). Only where its share means what a round's does:
    - the sequential design (a fixed `repeats` keeps pairing by round);
    - two sites of a pair on this machine (Topology.native_beside): not a chain campaign (its
      chain and direct cases compare by round), a mesh or a hub; not `remote` sites, where
      a real RTT makes a 1 s burst mostly TCP's ramp (not measured there yet);
    - a kind that leaves native's path native with these parameters
      (TunnelDriver.leaves_native);
    - nothing that would make native's bursts differ from native's own cases: an offload
      variant, netem, an RTT, loss, rate or site-size axis (whose reports pair one native per
      axis value)."""
    return not (not exp.sequential or not shape.native_beside(exp) or remote
                or case.tunnel.kind == "native" or case.offloads.settings
                or exp.netem is not None or case.rtt or case.loss or case.rate or case.cpus
                or not driver.leaves_native(case.tunnel.params))


def metric_record(key: str, m: Metric) -> MetricRecord:
    """A workload's Metric as the result format stores it: a Metric without base/dims (a
    plain named metric) is its own base with no dimensions."""
    return MetricRecord(m.base or key, m.value, m.unit, m.higher_is_better, m.bound,
                        dict(m.dims))


def _announce(progress: ProgressSink, event: PhaseEvent) -> None:
    """Tell the listener from a `finally` that must go on to the teardown whatever happens: a
    display problem is ignored, and a signal landing here is not lost (the handler recorded
    it; the runner's interrupts.check() after the case ends the run)."""
    try:
        progress(event)
    except Exception:   # Interrupted is one too
        pass


def cpu_summary(record: CpuRecord, warmup: float) -> dict[str, Any]:
    """The CPU figures of a case, the warm-up excluded: a sample that began within the first
    `warmup` seconds of the measurement window (a sample spans from the one before it, the
    first from 0) is left out of min/avg/max (it stays in `samples`). By its start, not its
    end: a sampler that woke late (its first sample at 1.07 s of a 1 s warm-up) still covers
    the warm-up. A window too short to have any other sample keeps them all, and says so."""
    starts = [0.0] + [float(s["t"]) for s in record.samples[:-1]]
    kept = [s for s, t0 in zip(record.samples, starts) if t0 >= warmup - 0.05]
    excluded = len(record.samples) - len(kept)
    if not kept:
        kept, excluded = record.samples, 0
    summary = CpuRecord(record.interval_s, kept, record.processes,
                        record.shared_by_sites).summary()
    summary["samples"] = record.samples
    summary["warmup_excluded_samples"] = excluded
    summary["shared_by_sites"] = record.shared_by_sites
    summary["other_pct_of_one_core"] = other_work(summary)
    if record.sites:   # separate hosts: each site's own figures (the top level is site a's)
        summary["sites"] = {name: cpu_summary(r, warmup) for name, r in record.sites.items()}
    return summary


def other_work(cpu: dict[str, Any]) -> float | None:
    """CPU the host spent on work that is not the case's during its measurement, % of one
    core: all cores' busy time less what the case's tracked processes (endpoints, daemons,
    ksoftirqd) used. Other tenants' processes, a test suite beside it, this process itself
    (~0.5 %). Softirq work charged to no tracked process (a packet received while a CPU
    idled) counts as other too, so an idle host reads a few %, not 0."""
    cores = [k for k in cpu.get("cores") or {} if k != "cpu"]
    if not cores or cpu.get("busy_avg") is None:
        return None
    ours = sum(float(p.get("pct_of_one_core") or 0.0)
               for p in (cpu.get("processes") or {}).values())
    return round(max(0.0, float(cpu["busy_avg"]) * len(cores) - ours), 1)


def _vanished(tb: Testbed | None) -> str:
    """A note when the case's namespaces were removed under it (by another process, e.g. a
    `tunbench cleanup` elsewhere): the failure is then not the tunnel's or the workload's."""
    if tb is None:
        return ""
    present = set(netlink.list_netns())
    # (a site's namespace on another host, as a chain between hosts has, is not seen here)
    gone = [str(s.netns) for s in tb.sites()
            if s.netns and not s.remote and s.netns not in present]
    return (f" (the testbed's namespaces {', '.join(gone)} were removed during the case by "
            "another process)") if gone else ""


def _cpu_metrics(cpu: dict[str, Any], out: Output) -> dict[str, MetricRecord]:
    res = {"cpu_busy": MetricRecord("cpu_busy", cpu["busy_avg"], "%", False),
           "cpu_busy_min": MetricRecord("cpu_busy_min", cpu["busy_min"], "%", False),
           "cpu_busy_max": MetricRecord("cpu_busy_max", cpu["busy_max"], "%", False)}
    for name, site_cpu in (cpu.get("sites") or {}).items():
        # separate hosts: each end's CPU apart (a = iperf3 client, b = server; a sends
        # unless the workload runs reversed, -R: the report names the ends by direction)
        res[f"cpu_busy_{name}"] = MetricRecord(f"cpu_busy_{name}", site_cpu["busy_avg"], "%",
                                               False)
        res[f"cpu_busy_max_{name}"] = MetricRecord(f"cpu_busy_max_{name}",
                                                   site_cpu["busy_max"], "%", False)
    tput = out.metrics.get("throughput")
    if tput and tput.value:
        cpu_pct_total = cpu["busy_avg"] * max(len(cpu["cores"]) - 1, 1)  # % of one core
        res["cpu_per_gbit"] = MetricRecord("cpu_per_gbit", cpu_pct_total / (tput.value / 1000.0),
                                           "% of a core per Gbit/s", False)
        for name, site_cpu in (cpu.get("sites") or {}).items():   # each end on its host
            pct = site_cpu["busy_avg"] * max(len(site_cpu["cores"]) - 1, 1)
            res[f"cpu_per_gbit_{name}"] = MetricRecord(
                f"cpu_per_gbit_{name}", pct / (tput.value / 1000.0), "% of a core per Gbit/s",
                False)
    return res


def _delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {site: {k: after[site][k] - before.get(site, {}).get(k, 0) for k in after[site]}
            for site in after}


# how long a case waits for the far end to answer ping through its tunnel before it fails
PING_THROUGH_S = 15.0


def wait_reachable(tb: Testbed, ep: Endpoints, family: int,
                   timeout: float | None = None) -> None:
    """The far inner address answers ping through the tunnel (tunnels may need a moment: IKE)
    within `timeout` seconds (None: PING_THROUGH_S)."""
    timeout = PING_THROUGH_S if timeout is None else timeout
    addr = ep.b4 if family == 4 else ep.b6
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        r = tb.a.run(["ping", "-c", "1", "-W", "1", "-n", str(addr)], check=False, timeout=5)
        if r.ok:
            return
        last = ((r.stdout + r.stderr).strip().splitlines()[-1:] or [""])[0]
    raise CommandFailed(f"tunnel is up but {addr} does not answer ping through it within "
                        f"{timeout:g}s ({last})", "see the case's error_log")


def _ifaces(tb: Testbed, ep: Endpoints) -> list[tuple[Site, str]]:
    out = [(tb.a, tb.a.underlay_if), (tb.b, tb.b.underlay_if)]
    for site, ifn in ((tb.a, ep.a_ifname), (tb.b, ep.b_ifname)):
        if ifn and (site, ifn) not in out:
            out.append((site, ifn))
    return out


def read_offloads(site: Site, ifn: str, tries: int = 3) -> dict[str, str]:
    """`ethtool -k` of one device; retried, since a busy host sometimes fails a read. A device
    that still cannot be read is recorded with the error instead of features."""
    msg = ""
    for attempt in range(tries):
        r = site.run(["ethtool", "-k", ifn], timeout=10, check=False)
        feats = envinfo.parse_ethtool_k(r.stdout) if r.ok else {}
        if feats:
            return feats
        msg = (r.stderr or r.stdout).strip()[-200:] or f"exit {r.returncode}"
        time.sleep(0.05 * (attempt + 1))
    return {"error": f"ethtool -k failed: {msg}"}


def record_offloads(tb: Testbed, ep: Endpoints) -> dict[str, dict[str, str]]:
    return {f"{site.where}/{ifn}": read_offloads(site, ifn) for site, ifn in _ifaces(tb, ep)}


def apply_offloads(tb: Testbed, ep: Endpoints, settings: tuple[tuple[str, str], ...],
                   before: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """ethtool -K each feature on each involved device, one feature at a time, so a feature
    that is fixed or absent on one device does not stop the others. Returns, per device and
    feature, what happened: set, unchanged (already so), fixed (the device cannot change it),
    absent (the device has no such feature) or failed (ethtool's message)."""
    result: dict[str, dict[str, str]] = {}
    for site, ifn in _ifaces(tb, ep):
        dev = f"{site.where}/{ifn}"
        have = before.get(dev) or {}
        if "error" in have:
            have = read_offloads(site, ifn)
        res = result.setdefault(dev, {})
        for feat, val in settings:
            cur = have.get(OFFLOAD_LONG_NAMES.get(feat, feat))
            if cur is None:
                res[feat] = "absent"
                continue
            if cur.split()[0] == val:
                res[feat] = "unchanged"
                continue
            if cur.endswith("[fixed]"):
                res[feat] = "fixed"
                continue
            if ifn == site.management_if:   # refused at open; never, whatever the path
                res[feat] = "refused: the interface carries the SSH session"
                continue
            r = site.run(["ethtool", "-K", ifn, feat, val], check=False, timeout=10)
            now = read_offloads(site, ifn).get(OFFLOAD_LONG_NAMES.get(feat, feat), "")
            if now.split()[:1] == [val]:
                res[feat] = "set"
                # set back at teardown: a host's own NIC keeps its settings after the case
                site.record_command(tb.ledger, ["ethtool", "-K", ifn, feat, cur.split()[0]])
            else:
                msg = (r.stdout + r.stderr).strip().replace("\n", " ")
                res[feat] = f"failed: {msg or 'value stayed ' + now}"
    return result


def missing_for(kind: str, raw: dict[str, Any] | None = None) -> list[Missing]:
    drv = tunnels.get(kind)
    return drv.requirements(drv.parse_params(raw or {}))
