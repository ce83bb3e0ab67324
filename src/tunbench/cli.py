"""tunbench command line: a thin layer over spec -> runner -> results -> report.

Errors become one line and an exit code here, and only here; tracebacks with --debug.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from . import __version__, cli_help, inputs, interrupts, runflags, shell, spec, tunnels, workloads
from .errors import Interrupted, SpecError, TunbenchError

DEFAULT_OUT = Path("results")
INTERNAL_ERROR = 70   # sysexits EX_SOFTWARE: a bug in tunbench, not the input or the host

# Flags whose value is a comma-separated list (split by inputs.split_list; the fuzz test
# checks every help text saying "comma-separated" is here)
LIST_FLAGS = ("--tunnels", "--workloads", "--mtu", "--offloads", "--streams",
              "--cpus-per-site", "--rtts", "--losses", "--rates")

EXIT_CODES = cli_help.EXIT_TABLE   # once, in `tunbench --help`


install_signal_handlers = interrupts.install_handlers   # (schedule --foreground too)


def available_kinds() -> dict[str, list[str]]:
    """kind -> list of reasons it cannot run here with its default params (empty: available;
    an automatically chosen implementation runs if any does)."""
    return {kind: [] if auto.available else auto.reasons
            for kind in sorted(tunnels.registry())
            for auto in tunnels.availability(kind)[:1]}


TRAFFIC_FLAGS = ("sizes", "mix", "genome", "flows")


def _traffic_overrides(args: argparse.Namespace, merged: dict[str, Any]) -> None:
    """--sizes / --mix / --genome / --flows set that parameter of every [[workload]] that has
    it (the workloads driving the UDP generator), checked together and named as the flags; a
    flag no chosen workload takes is refused."""
    given: dict[str, Any] = {}
    for key in TRAFFIC_FLAGS:
        val = getattr(args, key, None)
        if val is not None:
            given[key] = (inputs.split_list("--sizes", val) if key == "sizes" else
                          int(val) if key == "flows" and val.isdigit() else val)
    if not given:
        return
    tables = merged.get("workload") or [{"name": w} for w in spec.DEFAULT_WORKLOADS]
    taken: set[str] = set()
    for table in tables:
        name = table.get("name") if isinstance(table, dict) else None
        wl = workloads.registry().get(name) if isinstance(name, str) else None
        if wl is None:
            continue
        fields = {f.name for f in dataclasses.fields(wl.Params)}
        mine = {k: v for k, v in given.items() if k in fields}
        if not mine:
            continue
        try:   # named as the flags, not as the table they land in
            wl.parse_params({k: v for k, v in table.items() if k in fields} | mine)
        except SpecError as exc:
            problem = exc.message.split(": ", 1)[-1]
            flag = next((k for k in mine if problem.startswith(k)), None)
            raise SpecError(f"--{flag or '/--'.join(mine)}: {problem}",
                            "fix the flag's value; nothing was changed") from None
        table.update(mine)
        taken |= set(mine)
    for key in given:
        if key not in taken:
            takers = sorted(n for n, wl in workloads.registry().items()
                            if key in {f.name for f in dataclasses.fields(wl.Params)})
            raise SpecError(f"--{key} applies to none of the workloads chosen",
                            f"add one that takes it: --workloads {','.join(takers)}")
    merged["workload"] = tables


def spec_from_args(args: argparse.Namespace) -> spec.Experiment:
    from . import presets
    data: dict[str, Any] = {}
    source = "command line"
    if args.experiment and args.preset:
        raise SpecError("--experiment and --preset are exclusive",
                        "copy the preset (tunbench list shows its path) and edit it")
    if args.experiment:
        data = spec.load_toml(Path(args.experiment))
        source = str(args.experiment)
    elif args.preset:
        data = presets.load(args.preset)
        source = f"preset {args.preset}"
    if args.scale is not None:
        data = presets.scale(data, args.scale)
        source += f" (scale {args.scale:g})"
    over: dict[str, Any] = {"experiment": {}}
    e = over["experiment"]
    if args.noisy_cv is not None:
        e["noisy_cv"] = args.noisy_cv
    if args.offloads is not None:
        over["offloads"] = spec.offload_tables(args.offloads)
    for key in ("duration", "warmup", "repeats", "budget", "max_rounds", "rate",
                "seed", "natives") + spec.NETEM_KEYS:
        val = getattr(args, key)
        if val is not None:
            e[key] = val
    if args.mtu is not None:
        try:
            e["mtus"] = [int(m) for m in inputs.split_list("--mtu", args.mtu)]
        except ValueError:
            raise SpecError(f"--mtu {args.mtu!r} is not a list of integers",
                            "e.g. --mtu 1500 or --mtu 1500,9000") from None
    if args.shuffle:
        e["order"] = "shuffled"
    if getattr(args, "placement", None) is not None:
        e["placement"] = args.placement
    if getattr(args, "cpus_per_site", None) is not None:
        try:
            e["cpus_per_site"] = [int(k) for k in inputs.split_list("--cpus-per-site",
                                                                    args.cpus_per_site)]
        except ValueError:
            raise SpecError(f"--cpus-per-site {args.cpus_per_site!r} is not a list of core "
                            "counts", "e.g. --cpus-per-site 1,2") from None
    if getattr(args, "rtts", None) is not None:   # the RTT and loss axes (testbed/wanaxis.py)
        e["rtt"] = inputs.split_list("--rtts", args.rtts)
    if getattr(args, "losses", None) is not None:
        if args.loss is not None:
            raise SpecError("--loss and --losses both set the loss",
                            "give one: --loss for every case, --losses for an axis")
        e["loss"] = inputs.split_list("--losses", args.losses)
    if getattr(args, "rates", None) is not None:
        if args.rate is not None:
            raise SpecError("--rate and --rates both set the underlay rate",
                            "give one: --rate for every case, --rates for an axis")
        e["rate"] = inputs.split_list("--rates", args.rates)
    if args.tunnels is not None:
        over["tunnel"] = [{"kind": k} for k in inputs.split_list("--tunnels", args.tunnels)]
    if args.workloads is not None:
        over["workload"] = [{"name": w} for w in inputs.split_list("--workloads", args.workloads)]
    _site_overrides(args, data, over)
    _testbed_overrides(args, over)
    merged = spec.merge(data, over)
    _traffic_overrides(args, merged)
    runflags.apply(merged, runflags.parse_streams(args.streams) if args.streams is not None
                   else None, bool(getattr(args, "reverse", False)),
                   bool(getattr(args, "bidir", False)))
    kinds = available_kinds()
    avail = {k for k, why in kinds.items() if not why}
    flags = set(e) | {k for k in ("tunnel", "workload", "offloads", "testbed") if k in over}
    flags |= set(over.get("testbed", {}))    # kind / spokes / sites: named as their flags
    return spec.build(merged, source, available=avail, flags=flags)


def _testbed_overrides(args: argparse.Namespace, over: dict[str, Any]) -> None:
    """--testbed pair|hub|mesh, --spokes N and --sites N, over the file's [testbed] key by key (spec.merge)."""
    tb: dict[str, Any] = {}
    if getattr(args, "testbed", None) is not None:
        tb["kind"] = args.testbed
    if getattr(args, "spokes", None) is not None:
        tb["spokes"] = args.spokes
    if getattr(args, "mesh_sites", None) is not None:
        tb["sites"] = args.mesh_sites
    if tb:
        over["testbed"] = tb


def _out_dir(args: argparse.Namespace) -> Path:
    return Path(args.out) if args.out else DEFAULT_OUT / time.strftime("%Y%m%d-%H%M%S")


def check_out(out: Path) -> None:
    """The result folder can hold a new campaign: refused (exit 2) before anything runs."""
    try:
        if out.exists() and not out.is_dir():
            raise SpecError(f"--out {out} exists and is not a folder", "choose another --out")
        if (out / "index.json").exists():
            raise SpecError(f"--out {out} already holds a campaign",
                            "use --resume to continue it, or choose another --out folder")
        parent = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    except OSError as exc:
        raise SpecError(f"--out {out} cannot be used: {exc.strerror or exc}",
                        "choose another --out") from None
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"--out {out} cannot be created: {parent} is not a writable folder",
                        "choose another --out")


def _site_overrides(args: argparse.Namespace, data: dict[str, Any],
                    over: dict[str, Any]) -> None:
    """--site a=USER@HOST --site b=... (and --ssh-config, --heartbeat) replace the file's
    [sites]."""
    sites: dict[str, Any] | None = None
    for item in getattr(args, "site", None) or []:
        name, eq, target = item.partition("=")
        if not eq or not target:
            raise SpecError(f"--site {item!r} is not NAME=TARGET",
                            "e.g. --site a=root@gw1 --site b=root@gw2 (or b=local)")
        sites = sites or {}
        if name in sites:
            raise SpecError(f"--site {name} given twice", "give each site once")
        sites[name] = target
    if getattr(args, "ssh_config", None):
        sites = sites or dict(data.get("sites") or {})
        if not any(k in sites for k in ("a", "b", "hub", "s1")):
            raise SpecError(f"--ssh-config {args.ssh_config} is only used to reach remote sites",
                            "add --site a=USER@HOST --site b=USER@HOST (a hub testbed: "
                            "--site hub=... --site s1=...; a mesh: --site s1=... --site "
                            "s2=... --site s3=...), or leave it out")
        inputs.read_text(Path(os.path.expanduser(args.ssh_config)), "--ssh-config")
        sites["ssh_config"] = args.ssh_config
    if getattr(args, "heartbeat", None) is not None:
        sites = sites or dict(data.get("sites") or {})
        if not any(k in sites for k in ("a", "b", "hub", "s1")):
            raise SpecError("--heartbeat applies to remote sites only",
                            "add --site a=USER@HOST --site b=USER@HOST, or leave it out")
        sites["heartbeat"] = args.heartbeat
    if sites is not None:
        over["sites"] = sites


def cmd_run(args: argparse.Namespace) -> int:
    from .runner import run_campaign
    if args.resume:
        out = Path(args.resume)
        from .results import reader
        index = reader.read_index(out)
        if not isinstance(index.get("experiment"), dict):
            raise reader.ResultError(f"{out / 'index.json'} records no experiment",
                                     "start a new campaign with --out")
        exp = spec.build(_spec_dict(index["experiment"]), index["experiment"]["source"])
    else:
        exp = spec_from_args(args)
        out = _out_dir(args)
    from .runner import preflight
    preflight(exp)          # not possible here (exit 3) comes before a bad --out (exit 2)
    if not args.resume:
        check_out(out)
    if args.dry_run:
        return _dry_run(exp, out, resume=bool(args.resume))
    install_signal_handlers()
    from .report import console  # scipy behind it: imported once the input is known good
    from .report.live import ProgressReporter
    reporter = ProgressReporter(quiet=args.quiet)   # stderr, also with --json
    try:
        outcome = run_campaign(exp, out, reporter, resume=bool(args.resume))
    except Interrupted as exc:
        if (out / "index.json").exists():   # the campaign had begun: say how to go on
            exc.hint += f"; continue it with `tunbench run --resume {out}`"
        raise
    finally:
        reporter.close()
    from .store.commands import record_finished
    record_finished(out, args.db)   # one warning line if it cannot; never fails the run
    cases = outcome.store.read_cases()
    from .report import stats
    advice = _advice(out)
    seq_state = outcome.store.read_index().get("sequential")   # the sequential design's
    if args.json:
        doc = stats.summary_json(cases, str(out), exp.noisy_cv)
        if advice is not None:
            from .report import advise
            doc["decision"] = advise.to_json(advice)
        if seq_state:
            doc["sequential"] = seq_state
        print(json.dumps(doc, indent=1))
    else:
        if advice is not None:
            from .report import advise_view
            advise_view.print_advice(advice, ranking=False)
        console.print_summary(cases, str(out), noisy_cv=exp.noisy_cv)
        if seq_state:
            from .sequential import summary_lines
            for line in summary_lines(seq_state):
                print(line)
    if not args.no_report:
        _report_after_run(out, quiet=args.quiet)
    return 1 if outcome.failed and len(outcome.failed) == len(outcome.statuses) else 0


def _advice(out: Path) -> Any:
    """The decision summary of the campaign just run (report/advise.py); None, with one
    warning line, where it cannot be computed: it never fails the run."""
    from .report import advise, data
    try:
        return advise.build([data.load(out)])
    except Exception as exc:  # the results are safe on disk; `tunbench advise` retries
        print(f"tunbench: decision summary not computed ({type(exc).__name__}: {exc}); "
              f"retry with `tunbench advise {out}`", file=sys.stderr)
        return None


def _dry_run(exp: spec.Experiment, out: Path, resume: bool) -> int:
    """The plan of a validated, preflighted experiment: nothing on the system is changed,
    no folder is written."""
    from . import topologies
    from .plan import plan
    from .progress import Estimate
    from .runner import case_plans
    cases = plan(exp)
    if resume:
        from .results.store import CampaignStore
        from .runner import recorded_cases, resume_done
        store = CampaignStore(out)
        done = resume_done(exp, cases, recorded_cases(store.read_index()["cases"], store))
        cases = [c for c in cases if c.case_id not in done]
    eta = Estimate(case_plans(exp, cases)).total()
    print(f"plan: {len(cases)} case(s), about {eta / 60:.1f} min; results would go to {out}")
    if exp.sequential:
        print(f"sequential: then rounds only for the pairs still open, at most "
              f"{exp.max_rounds} rounds and {exp.budget / 60:g} min of measurement")
    for line in topologies.of(exp).plan_text(exp):   # e.g. the mesh's schedule
        print(line)
    if exp.cpus_per_site:   # which CPUs each site gets at each count (testbed/sitecores.py)
        from .testbed import sitecores
        have = sitecores.host_cpus()
        lay = sitecores.layout(exp.cpus_per_site, len(have))
        print(f"cores per site, {lay}: " + "; ".join(
            f"{k}: a on {(s := sitecores.site_sets(k, have, lay))['a']}, b on {s['b']}"
            for k in exp.cpus_per_site) + " (a cpuset cgroup per site"
            + (", RPS on its underlay)" if exp.placement != "processes" else ")"))
        print(f"  layout {lay}: "
              + sitecores.layout_reason(lay, exp.cpus_per_site, len(have)))
    if exp.rtts or exp.losses:   # the netem of each scenario (testbed/wanaxis.py)
        from .testbed import wanaxis
        print("scenarios (netem on each underlay end): " + "; ".join(
            f"{wanaxis.scenario_tag(r, lo)}: "
            + ("netem " + " ".join(n.args()) if (n := exp.case_netem(r, lo)) else "none")
            for r in exp.rtts or ("",) for lo in exp.losses or ("",)))
    if exp.rates:   # the tbf of each scenario (testbed/wanaxis.py, testbed/local.py)
        from .testbed.local import tbf_args
        print("scenarios (tbf on each underlay end): " + "; ".join(
            f"rate={r}: " + " ".join(tbf_args(r)) for r in exp.rates))
    for c in cases:
        print(f"  {c.case_id}")
    return 0


def _report_after_run(out: Path, quiet: bool) -> None:
    """The HTML report of the run just finished; a failure here never fails the run."""
    from .report import build
    try:
        rep = build.build(out)
    except Exception as exc:  # the results are safe on disk; say why there is no report
        print(f"tunbench: report not written ({type(exc).__name__}: {exc}); "
              f"retry with `tunbench report {out}`", file=sys.stderr)
        return
    if not quiet:
        print(f"report: {rep.html} ({len(rep.figures)} figures)", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    from .report import advise_cli, build, console, export, headlines
    from .shell import check_dir
    if Path(args.dir).is_dir():   # DIR/report: a file there is one line, exit 2, up front
        check_dir(Path(args.dir) / "report", "report folder")
    rep = build.build(Path(args.dir), advise_cli.constraints_from(args))
    console.print_folder_problems(rep.campaign.folder)
    if args.csv:
        sys.stdout.write(rep.csv.read_text())
        return 0
    if rep.advice is not None:
        from .report import advise_view
        advise_view.print_advice(rep.advice)
    print(f"report: {rep.html}")
    for f in rep.figures:
        print(f"  figure {f.name}: {f.title}")
    sel = headlines.select(rep.takeaways)
    for t in sel.top:
        print(f"  - {t.text}")
    for caveat in sel.caveats:
        print(f"  ({caveat})")
    if sel.rest:
        print(f"  ... {len(sel.rest)} more take-away(s) in the report")
    print(f"  exports: {rep.csv}, {rep.parquet} ({len(export.COLUMNS)} columns)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .report import compare
    if not (math.isfinite(args.threshold) and 0 <= args.threshold <= 1000):
        raise SpecError(f"--threshold {args.threshold:g} must be a percentage from 0 to 1000",
                        "e.g. --threshold 5 ignores regressions under 5 %")
    fmt = "json" if args.json else (args.format or "text")
    if args.json and args.format not in (None, "json"):
        raise SpecError(f"--json and --format {args.format} contradict each other",
                        "give one of them")
    if args.wide and fmt != "text":
        raise SpecError(f"--wide applies to the text table, not --format {fmt}",
                        "leave out --wide (md and html fold the details themselves)")
    if args.html:   # a folder there or a missing parent: exit 2 before any reading
        shell.check_file(Path(args.html), "--html")
    res = compare.run(Path(args.a), Path(args.b), force=args.force)
    from .report import compare_view, console
    for camp in res.campaigns:
        console.print_folder_problems(camp.folder)
    code = compare.exit_code(res, args.threshold, args.allow_untested)
    if args.html:
        Path(args.html).write_text(compare_view.html_page(res, args.threshold,
                                                          args.allow_untested))
    if fmt == "json":
        print(json.dumps(compare.to_json(res, args.threshold, args.allow_untested), indent=1))
    elif fmt == "md":
        sys.stdout.write(compare_view.markdown(res, args.threshold, args.allow_untested))
    elif fmt == "html":
        sys.stdout.write(compare_view.html_page(res, args.threshold, args.allow_untested))
    elif args.wide:
        compare_view.print_table(res, args.threshold, args.allow_untested)
    else:
        compare_view.print_narrow(res, args.threshold, args.allow_untested)
    return code


def _spec_dict(recorded: dict[str, Any]) -> dict[str, Any]:
    """The spec dict that rebuilds a recorded experiment (for --resume)."""
    exp: dict[str, Any] = {k: recorded[k] for k in (
        "repeats", "budget", "max_rounds", "duration", "warmup", "mtus", "order", "seed",
        "family", "name", "cpu_interval", "noisy_cv", "cpus_per_site", "rtt")
        if recorded.get(k) is not None}
    exp["placement"] = recorded.get("placement", "off")   # recorded before it existed: off
    exp["natives"] = recorded.get("natives", 1)   # recorded before it existed: one per round
    for key in ("rate",) + spec.NETEM_KEYS:
        if recorded.get(key):
            exp[key] = recorded[key]
    return {
        "experiment": exp,
        "tunnel": [{"kind": t["kind"], "label": t["label"], **t["params"]}
                   for t in recorded["tunnels"]],
        "workload": [{"name": w["name"], "label": w.get("label") or w["name"], **w["params"],
                      **({"mtus": w["mtus"]} if w.get("mtus") else {})}
                     for w in recorded["workloads"]],
        "offloads": [{"name": o["name"], **o["settings"]} for o in recorded["offloads"]],
        **({"sites": {**{n: {k: v for k, v in site.items() if v}
                         for n, site in recorded["sites"].items()},
                      **({"ssh_config": recorded["ssh_config"]}
                         if recorded.get("ssh_config") else {}),
                      **({"heartbeat": recorded["heartbeat"]}
                         if "heartbeat" in recorded else {})}}
           if recorded.get("sites") else {}),
        **({"testbed": dict(recorded["testbed"])} if recorded.get("testbed") else {}),
    }


def cmd_list(args: argparse.Namespace) -> int:
    from . import listing, presets, topologies
    if args.topologies:   # KIND, if given, names a topology
        if args.kind:
            topologies.get(args.kind)
        if args.json:
            print(json.dumps(listing.topologies_json(args.kind), indent=1))
        else:
            listing.print_topologies(args.kind)
        return 0
    if args.kind:
        listing.check_kind(args.kind)
    kinds = available_kinds()
    if args.json:
        print(json.dumps(listing.list_json(
            kinds, {n: {"summary": presets.describe(n), "path": presets.path(n)}
                    for n in presets.names()}, spec.OFFLOAD_PRESETS, args.kind),
            indent=1, default=list))
        return 0
    if args.params:
        sys.stdout.write(listing.params_toml(kinds, args.kind))
        return 0
    listing.print_list(kinds, only=args.kind)
    if not args.kind:
        listing.print_presets({n: (presets.describe(n), presets.path(n))
                               for n in presets.names()}, spec.OFFLOAD_PRESETS)
    return 0


def _ssh_options(args: argparse.Namespace) -> Any:
    from .remote.transport import SshOptions
    cfg = getattr(args, "ssh_config", None)
    return SshOptions(config_file=Path(os.path.expanduser(cfg)) if cfg else None)


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor
    if args.site:
        from .remote import sitecheck
        sdoc = sitecheck.report(args.site, _ssh_options(args))
        print(json.dumps(sdoc, indent=1) if args.json else sitecheck.format_table(sdoc))
        return 0
    doc = doctor.report(probe=args.probe)
    print(json.dumps(doc, indent=1) if args.json else doctor.format_table(doc))
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from .remote import prepare
    if args.yes and args.dry_run:
        raise SpecError("--yes and --dry-run contradict each other",
                        "--dry-run only prints the plan; --yes installs without asking")
    kinds = [k for k in (args.tunnels or "").split(",") if k]
    loads = [w for w in (args.workloads or "").split(",") if w]
    return prepare.prepare(args.site, _ssh_options(args), kinds, loads, yes=args.yes,
                           dry_run=args.dry_run)


def cmd_cleanup(args: argparse.Namespace) -> int:
    from .capabilities import root_missing
    from .testbed import journals, ledger, local, names
    m = root_missing()
    if m:
        raise TunbenchError(m.why, m.fix)
    if args.site:   # a remote host: its agent sweeps the journals crashed agents left there
        from .remote import sitecheck
        swept, kept = sitecheck.cleanup(args.site, _ssh_options(args))
        for line in swept:
            print(f"removed on {args.site}: {line}")
        for line in kept:
            print(f"kept on {args.site}: {line}")
        print(f"cleanup {args.site}: {len(swept)} leftover object(s) removed" if swept else
              f"cleanup {args.site}: nothing left over")
        return 0
    if args.run:    # one run only: its journal, its objects, its controller's ssh masters
        from .remote import transport
        if not names.is_run_id(args.run):
            raise SpecError(f"invalid run id {args.run!r}", "give the run id of a case "
                            f"(run_id in its result file): {names.RUN_ID_LEN} hex digits")
        if ledger.owner_alive(args.run):
            raise TunbenchError(f"run {args.run} is still running", "stop it first")
        owner = ledger.read_owner(args.run)
        done = journals.replay(args.run) + local.sweep(args.run)
        if owner is not None:
            done += transport.sweep_control_dir(controller=owner)
    else:
        done = journals.replay() + local.sweep()
    for line in done:
        print(f"removed {line}")
    print(f"cleanup: {len(done)} leftover object(s) removed" if done else
          "cleanup: nothing left over")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line naming the flag (exit 2), like tunbench's own,
    instead of a usage dump whose last line is the only one that matters."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tunbench: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="tunbench", usage="tunbench [-h] [--version] [--debug] COMMAND ...",
               description="Benchmark tunnels and encryption between two "
               "sites: throughput, latency, CPU.", epilog=EXIT_CODES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"tunbench {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs "
                   "(also accepted after the command)")
    # --debug after the command too; SUPPRESS keeps an absent one from resetting the first
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and debug logs")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help=argparse.SUPPRESS)   # listed by task in the description

    def add(name: str, **kw: Any) -> argparse.ArgumentParser:
        """A command, with --debug and the exit codes it can return (cli_help)."""
        return sub.add_parser(name, parents=[common], epilog=cli_help.command_epilog(name),
                              prog=f"tunbench {name}",
                              formatter_class=argparse.RawDescriptionHelpFormatter, **kw)

    r = add("run", help="run a campaign and write a result folder",
            usage="tunbench run [-t SECONDS] [-P N[,N...]] [-R | --bidir]\n"
                  "                    [--tunnels KIND,...] [--workloads NAME,...] [options "
                  "below]",
            description="Measure tunnels against native (no tunnel) in the same run.\n"
            "-t, -P, -R and --bidir mean what they mean to iperf3: tunbench run -t 10 -P "
            "1,4,16 -R")
    _add_run_options(r)
    r.set_defaults(func=cmd_run)

    rp = add("report", help="figures, HTML report and CSV/Parquet of a result "
                        "folder, into DIR/report/")
    rp.add_argument("dir", metavar="DIR", help="result folder (with index.json)")
    rp.add_argument("--csv", action="store_true",
                    help="also print the tidy CSV (one row per case x metric) to stdout")
    from .report import advise_cli
    advise_cli.add_constraint_options(rp)   # the decision summary's ranking, as in advise
    rp.set_defaults(func=cmd_report)

    cp = add("compare", help="change per tunnel and metric from campaign A to B, with a "
             "verdict (a CI gate: exit 1 on a significant regression)")
    cp.add_argument("a", metavar="A", help="result folder: before")
    cp.add_argument("b", metavar="B", help="result folder: after")
    cp.add_argument("--threshold", type=float, default=0.0, metavar="PCT",
                    help="ignore regressions smaller than PCT percent of A's mean (default 0)")
    cp.add_argument("--format", choices=("text", "md", "html", "json"), default=None,
                    help="text (default: a table per scenario that fits 80-100 columns, "
                    "headline metrics first, the rest folded), md (Markdown for a CI "
                    "comment), html (a page with an overlay figure of both campaigns), json")
    cp.add_argument("--json", action="store_true", help="print one JSON object (--format json)")
    cp.add_argument("--wide", action="store_true", help="every metric and column (CIs, "
                    "shares of native, test methods); wider than a terminal")
    cp.add_argument("--html", metavar="FILE", help="also write the HTML page (with the "
                    "overlay figure) to FILE")
    cp.add_argument("--force", action="store_true", help="compare campaigns whose settings, "
                    "host or tools differ (refused otherwise, exit 2); every line is marked")
    cp.add_argument("--allow-untested", action="store_true", help="let entries with fewer "
                    "than 2 repeats on a side pass (otherwise they make the exit code 2)")
    cp.set_defaults(func=cmd_compare)

    ls = add("list", help="tunnel kinds and workloads, and whether each runs here")
    ls.add_argument("kind", nargs="?", metavar="KIND", help="only this tunnel kind or workload")
    ls.add_argument("--json", action="store_true", help="one versioned JSON object ("
                    "'reasons' as in doctor)")
    ls.add_argument("--params", action="store_true", help="every parameter with its default "
                    "and description, as TOML to paste into an experiment file")
    ls.add_argument("--topologies", action="store_true", help="the topologies (pair, hub, "
                    "chain): how an experiment picks each, its settings, what it needs and "
                    "the tunnel kinds it runs (KIND: one topology)")
    ls.set_defaults(func=cmd_list)

    d = add("doctor", help="what this host can run and exactly why not (read-only)")
    d.add_argument("--json", action="store_true")
    d.add_argument("--probe", action="store_true", help="build a throwaway testbed to read the "
                   "underlay's offloads (needs root; torn down at once)")
    d.add_argument("--site", metavar="USER@HOST", help="check a remote host over SSH instead")
    d.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                   help="ssh config file (ssh -F; default ~/.ssh/config)")
    d.set_defaults(func=cmd_doctor)

    from types import SimpleNamespace

    from .schedule import commands as schedule_commands
    from .store import commands as store_commands
    from .trend import commands as trend_commands
    # their parsers get --debug and the exit codes; schedule gets what it needs of this module
    shared = SimpleNamespace(add_parser=add, spec_from_args=spec_from_args,
                             parse_run=lambda argv: build_parser().parse_args(["run", *argv]),
                             install_signal_handlers=install_signal_handlers)
    store_commands.add_parsers(shared)
    schedule_commands.add_parsers(shared)
    trend_commands.add_parsers(shared)

    pr = add("prepare", help="install on remote hosts what the chosen tunnel kinds and "
             "workloads need (apt-get, dnf), after printing the plan")
    pr.add_argument("--site", metavar="USER@HOST", action="append", required=True,
                    help="a host to prepare (repeat for several)")
    pr.add_argument("--tunnels", metavar="K1,K2", help="tunnel kinds to prepare for (every "
                    "implementation's tools; default: every tool doctor --site checks)")
    pr.add_argument("--workloads", metavar="W1,W2", help="workloads to prepare for")
    pr.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                    help="ssh config file (ssh -F; default ~/.ssh/config)")
    pr.add_argument("--yes", action="store_true", help="install without asking")
    pr.add_argument("--dry-run", dest="dry_run", action="store_true",
                    help="only print the plan")
    pr.set_defaults(func=cmd_prepare)

    c = add("cleanup", help="remove leftovers of crashed runs (tb- objects only)")
    c.add_argument("--site", metavar="USER@HOST", help="sweep a remote host over SSH instead "
                   "(what crashed tunbench agents left in its /run/tunbench, and the runs "
                   "there whose controller is gone)")
    c.add_argument("--run", metavar="RUN_ID", help="only this run's leftovers (its journal, "
                   "objects named with its id, the ssh masters of its controller)")
    c.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                   help="ssh config file (ssh -F; default ~/.ssh/config)")
    c.set_defaults(func=cmd_cleanup)

    from .tbtun import rules
    rules.add_parser(shared)
    advise_cli.add_parser(shared)
    from .report import export_cli
    export_cli.add_parser(shared)
    _debug_everywhere(p)
    p.description = (p.description or "") + "\n\ncommands by task:\n" + \
        cli_help.commands_by_task(sub) + "\n\n`tunbench COMMAND --help` for a command's flags."
    return p


def _add_run_options(r: argparse.ArgumentParser) -> None:
    """`tunbench run`'s flags, grouped as a user looks for them; iperf3's short options
    (-t, -P, -R, --bidir) mean what they mean to iperf3 (runflags.py)."""
    from . import presets
    what = r.add_argument_group("what to measure")
    what.add_argument("--tunnels", metavar="KIND,...", help="comma-separated kinds, or 'all' "
                      "(every kind available here); default: native,vxlan")
    what.add_argument("--workloads", metavar="NAME,...",
                      help="comma-separated workloads; default: stream")
    what.add_argument("-P", "--streams", metavar="N[,N...]", help="parallel TCP streams, as "
                      "iperf3 -P; comma-separated counts run one case each (-P 1,4,16), "
                      "drawn as a sweep; for the workloads that take streams (stream, "
                      "parallel-streams, latency-under-load)")
    way = what.add_mutually_exclusive_group()
    way.add_argument("-R", "--reverse", action="store_true", help="reverse, as iperf3 -R: the "
                     "server side (site b) sends to site a; recorded in each case and named "
                     "in the report ('stream reverse')")
    way.add_argument("--bidir", action="store_true", help="both directions at once, as iperf3 "
                     "--bidir (stream, parallel-streams): throughput is their sum, each "
                     "direction kept as 'Throughput, site a → b' and 'b → a'")
    what.add_argument("--experiment", metavar="FILE",
                      help="TOML experiment file (flags override)")
    what.add_argument("--preset", metavar="NAME", help="a shipped experiment (tunbench list "
                      "shows them): " + ", ".join(presets.names()))
    what.add_argument("--offloads", metavar="VARIANTS", help="offload variants, comma-separated "
                      "(default, no-tso-gro, no-gso-gro, no-tnl-seg, gro-on, all-off): every "
                      "case runs once per variant, ethtool -K on underlay and tunnel devices")
    what.add_argument("--sizes", metavar="SIZE,...", help="packet sizes of the workloads that "
                      "generate UDP (loss-search): IP total lengths, imix, mix, genome; e.g. "
                      "361,imix")
    what.add_argument("--mix", metavar="SIZE:WEIGHT,...", help="custom IMIX for the workloads "
                      "that generate UDP (loss-search), IP bytes, e.g. 64:7,570:4,1518:1")
    what.add_argument("--genome", metavar="LETTERS", help="RFC 6985 size letters for the "
                      "workloads that generate UDP (loss-search), e.g. aaaaaaaabbbbg")
    what.add_argument("--flows", metavar="N|SxDxSPxDP", help="flows of the workloads that "
                      "generate UDP (loss-search): a count (source ports), or source x "
                      "destination addresses x source x destination ports, e.g. 5x5x100x100")

    when = r.add_argument_group("how long and how often")
    when.add_argument("-t", "--duration", type=float, metavar="SECONDS",
                      help="seconds per measurement, as iperf3 -t (default 10)")
    when.add_argument("--warmup", type=float, metavar="SECONDS", help="seconds excluded at the "
                      "start, as iperf3 -O (default 1)")
    when.add_argument("--repeats", type=int, metavar="N", help="a fixed number of rounds of "
                      "every case (default: rounds until the ranking is decided, within "
                      "--budget); rounds are the outer loop, native first in each")
    when.add_argument("--budget", metavar="SPAN", help="without --repeats: measurement time "
                      "at most, e.g. 15m, 90s, 1h (default 15m)")
    when.add_argument("--max-rounds", dest="max_rounds", type=int, metavar="N",
                      help="without --repeats: rounds at most (default 20)")
    when.add_argument("--natives", type=int, metavar="N", help="native runs per round, "
                      "spread through it; each method is paired with their geometric mean "
                      "(default: about the square root of the number of methods, 1 to 3)")
    when.add_argument("--scale", type=float, metavar="F", help="multiply the preset's/file's "
                      "durations and repeats by F for a quick run (e.g. 0.05; minimum 2 s, "
                      "1 repeat)")
    when.add_argument("--shuffle", action="store_true",
                      help="shuffle case order within a round")
    when.add_argument("--seed", type=int, help="seed for --shuffle")

    where = r.add_argument_group("where (testbed, underlay and network conditions)")
    where.add_argument("--mtu", metavar="BYTES[,BYTES]",
                       help="underlay MTU(s), comma-separated (default 1500)")
    where.add_argument("--rate", help="shape the underlay with tbf, e.g. 500mbit")
    where.add_argument("--delay", help="netem delay on both underlay ends, e.g. 25ms")
    where.add_argument("--jitter", help="netem jitter (needs --delay), e.g. 5ms")
    where.add_argument("--loss", help="netem random loss on both underlay ends, e.g. 0.1%%")
    where.add_argument("--netem-rate", dest="netem_rate",
                       help="netem rate limit, e.g. 100mbit")
    where.add_argument("--site", action="append", metavar="NAME=TARGET",
                       help="run between real hosts over SSH: --site a=USER@HOST --site "
                       "b=USER@HOST ('local' = this host); default: two namespaces here. With "
                       "--testbed hub: --site hub=USER@HOST --site s1=USER@HOST ... sN=..., "
                       "one host each; with --testbed mesh: --site s1=TARGET ... sN=..., one "
                       "host each, at most one of them local")
    where.add_argument("--ssh-config", dest="ssh_config", metavar="FILE",
                       help="ssh config file for the sites (ssh -F; default ~/.ssh/config)")
    where.add_argument("--heartbeat", type=float, metavar="S", help="the hosts' agents end the "
                       "run this long after tunbench falls silent (killed, frozen, cut off); "
                       "default 30, 0 = off (docs/remote.md)")
    where.add_argument("--testbed", metavar="KIND", help="pair (default: two sites), hub (one "
                       "hub site and --spokes N spoke sites; kinds native, vxlan, ebpf-vxlan; "
                       "workload stream, to one spoke and to all at once) or mesh (--sites N "
                       "namespaces on one bridge, every pair measured in turn; "
                       "docs/topologies.md)")
    where.add_argument("--spokes", type=int, metavar="N", help="spoke sites of --testbed hub "
                       "(1..1000, default 10; on hosts: the number of --site sN given)")
    where.add_argument("--sites", dest="mesh_sites", type=int, metavar="N",
                       help="sites of --testbed mesh (3..32; [testbed] pairs and directions "
                       "in an experiment file choose the pairs)")
    where.add_argument("--placement", choices=("sites", "processes", "off"),
                       help="per-site CPU placement: each site's processes and receive work on "
                       "its own CPUs (sites), its processes only (processes, the default: it "
                       "keeps the two ends of a measurement off one CPU), or where the "
                       "scheduler puts them (off; docs/methodology.md)")
    where.add_argument("--cpus-per-site", metavar="K,...", help="site size in cores, "
                       "comma-separated counts (e.g. 1,2): each a scenario, every method "
                       "measured with each site confined to K CPUs (a cpuset cgroup per "
                       "site, RPS on its underlay); one layout for the whole axis: the "
                       "sites apart when 2 x the largest K fit in the CPUs, else both on "
                       "the same lowest K CPUs at every K; local testbed, fixed --repeats "
                       "(docs/methodology.md)")
    where.add_argument("--rtts", metavar="RTT,...", help="RTT axis, comma-separated (e.g. "
                       "0ms,20ms,80ms): each a scenario, every method measured at each in the "
                       "same round, native first; netem delay of half of it on each underlay "
                       "end (0ms: none). Needs netem (CONFIG_NET_SCH_NETEM): the VM lab or "
                       "real hosts; fixed --repeats (docs/methodology.md)")
    where.add_argument("--losses", metavar="LOSS,...", help="loss axis, comma-separated (e.g. "
                       "0%%,0.1%%): netem random loss on each underlay end, each a scenario as "
                       "--rtts (with both: every pair); needs netem")
    where.add_argument("--rates", metavar="RATE,...", help="underlay rate axis, "
                       "comma-separated (e.g. 100mbit,1gbit): tbf on each underlay end, each "
                       "a scenario as --rtts (not with --rtts/--losses); needs tbf only")

    out = r.add_argument_group("output")
    out.add_argument("--out", metavar="DIR", help="result folder (default results/<timestamp>)")
    out.add_argument("--resume", metavar="DIR", help="continue an interrupted campaign")
    out.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr (it is shown "
                     "otherwise, also with --json)")
    out.add_argument("--no-report", action="store_true",
                     help="do not write the HTML report (DIR/report/) after the run")
    out.add_argument("--dry-run", action="store_true", help="check the experiment and this "
                     "host (exit 2 or 3 as a run would) and print the planned cases; changes "
                     "nothing")
    out.add_argument("--noisy-cv", type=float, metavar="CV", help="flag figures whose "
                     "coefficient of variation exceeds CV (default 0.10)")
    out.add_argument("--db", metavar="FILE", help="results store to record the campaign in "
                     "(default $TUNBENCH_DB, else ~/.local/share/tunbench/results.db; 'off': "
                     "none)")


def _debug_everywhere(parser: argparse.ArgumentParser) -> None:
    """--debug after any command and action too (`tunbench db import DIR --debug`): the
    actions' parsers (db, schedule, ...) are made by their modules without the common one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                if "--debug" not in child._option_string_actions:
                    child.add_argument("--debug", action="store_true",
                                       default=argparse.SUPPRESS,
                                       help="show tracebacks and debug logs")
                _debug_everywhere(child)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args: list[str] = []
    if "schedule" in argv[:2] and "--" in argv:   # schedule add NAME ... -- <run options>
        cut = argv.index("--")
        argv, run_args = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if run_args:
        args.run_args = run_args
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return dispatch(args)


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; every error becomes one line and its exit code, here only."""
    try:
        code = int(args.func(args))
        sys.stdout.flush()      # a pipe closed after the last line fails here, not at exit
        return code
    except BrokenPipeError:     # `| head`, a pager quit: end quietly, as a SIGPIPE'd tool
        shell.silence_stdout()
        return shell.EXIT_PIPE
    except TunbenchError as exc:
        _debug_traceback(args)
        print(f"tunbench: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tunbench: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line and its own exit code, the traceback on request
        _debug_traceback(args)
        print(f"tunbench: internal error ({type(exc).__name__}: {_short(exc)}); "
              "rerun with --debug for the traceback", file=sys.stderr)
        return INTERNAL_ERROR


def _debug_traceback(args: argparse.Namespace) -> None:
    """With --debug the traceback comes first; the line and exit code stay the same, so a
    script sees the same result either way."""
    if args.debug:
        traceback.print_exc()


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
