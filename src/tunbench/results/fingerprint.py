"""What makes two campaigns' figures comparable, as one dict: the campaign's fingerprint.

Recorded in index.json at write time (`"fingerprint"`), and derived from the experiment and
environment an older campaign recorded, by the same function, so both compare alike. Two
campaigns compare only when every field agrees (`differences` names each one that does not):
the testbed kind, the underlay (tbf rate, netem delay/jitter/loss/rate), the durations and
warm-up, kernel, CPU model and count, the versions of the tools its workloads and tunnels
run, and, for the tunnels and workloads both campaigns hold, their parameters (which include
each kind's implementation: impl, datapath, cipher). Underlay MTUs need only overlap: scenarios
are matched per MTU, so only the common ones are compared.
"""

from __future__ import annotations

from typing import Any

FINGERPRINT_VERSION = 1
UNDERLAY_KEYS = ("rate", "delay", "jitter", "loss", "netem_rate")


def _kind_tools(kind: str) -> tuple[str, ...]:
    """Tools whose version shapes a tunnel kind's figures, as its driver declares them
    (`fingerprint_tools`; workloads declare their own `tools`)."""
    from .. import tunnels
    return tunnels.fingerprint_tools(kind)


def _workload_tools(name: str) -> tuple[str, ...]:
    from .. import workloads
    try:
        return tuple(workloads.get(name).tools)
    except Exception:   # a workload this build does not know: no tool to pin
        return ()


def derive(experiment: dict[str, Any], env: dict[str, Any],
           testbed: str = "local") -> dict[str, Any]:
    """The fingerprint of a campaign from its experiment (Experiment.to_dict()) and env."""
    tunnels = {str(t.get("label") or t["kind"]): {"kind": t["kind"],
                                                  "params": t.get("params") or {}}
               for t in experiment.get("tunnels") or []}
    workloads = {str(w.get("label") or w["name"]): {"name": w["name"],
                                                    "params": w.get("params") or {}}
                 for w in experiment.get("workloads") or []}
    wanted = {tool for w in workloads.values() for tool in _workload_tools(w["name"])}
    wanted |= {tool for t in tunnels.values() for tool in _kind_tools(t["kind"])}
    versions = env.get("tools") or {}
    return {
        "version": FINGERPRINT_VERSION,
        "testbed": experiment.get("testbed") or testbed,
        "underlay": {k: experiment.get(k) or None for k in UNDERLAY_KEYS},
        "mtus": sorted(set(experiment.get("mtus") or [])),
        "duration": experiment.get("duration"),
        "warmup": experiment.get("warmup"),
        "kernel": env.get("kernel"),
        "cpu_model": env.get("cpu_model"),
        "cpus": env.get("cpus"),
        "tools": {t: versions.get(t) for t in sorted(wanted)},
        "tunnels": tunnels,
        "workloads": workloads,
        # per-site CPU placement (testbed/placement.py): only when on, so every campaign
        # recorded before it (and every one with it off) keeps its fingerprint
        **({"placement": experiment["placement"]}
           if experiment.get("placement", "off") != "off" else {}),
        # site size in cores (testbed/sitecores.py): only on that axis, as placement
        **({"cpus_per_site": sorted(experiment["cpus_per_site"])}
           if experiment.get("cpus_per_site") else {}),
        # the RTT axis (testbed/wanaxis.py; the loss axis is the underlay's loss, a list)
        **({"rtt": list(experiment["rtt"])} if experiment.get("rtt") else {}),
    }


def of_index(index: dict[str, Any]) -> dict[str, Any]:
    """The recorded fingerprint, else the one derived from what the campaign recorded."""
    fp = index.get("fingerprint")
    if isinstance(fp, dict) and fp.get("version") == FINGERPRINT_VERSION:
        return fp
    return derive(index.get("experiment") or {}, index.get("env") or {})


def show(v: Any) -> str:
    """A setting as a reader reads it: a list as its values in the user's spelling,
    comma-separated ('100mbit, 1gbit', MTUs '1500, 9000'), never Python's repr; 'none' unset."""
    if v is None or v == {} or v == "" or v == []:
        return "none"
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={show(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(show(x) for x in v)
    return str(v)


# parameters that say how a share of native is measured, not what is measured: a campaign
# that has them compares with one recorded before them (stream's native beside the method,
# docs/methodology.md; the estimator is the same, so are the figures it is read against)
NOT_A_SETTING = {"stream": ("native_bursts",)}


def _unset_dropped(entry: dict[str, Any]) -> dict[str, Any]:
    """A tunnel's or workload's entry with the parameters that are off (False, "", None)
    left out: a switch a later version added (stream's `bidir`) and left off is the same
    setting as its absence in an older campaign; and those of NOT_A_SETTING."""
    params = entry.get("params")
    if not isinstance(params, dict):
        return entry
    skip = NOT_A_SETTING.get(str(entry.get("name") or ""), ())
    return {**entry, "params": {k: v for k, v in params.items()
                                if not (v is False or v is None or v == "" or k in skip)}}


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Each field that makes A's figures incomparable with B's, one line each
    ("underlay rate: A none, B 200mbit"); empty when they compare."""
    out = []
    for key, label in (("testbed", "testbed"), ("duration", "duration (s)"),
                       ("warmup", "warm-up (s)"), ("kernel", "kernel"),
                       ("cpu_model", "CPU model"), ("cpus", "CPU count")):
        if a.get(key) != b.get(key):
            out.append(f"{label}: A {show(a.get(key))}, B {show(b.get(key))}")
    pa, pb = a.get("placement", "off"), b.get("placement", "off")
    if pa != pb:
        out.append(f"CPU placement: A {pa}, B {pb}")
    for key, label in (("cpus_per_site", "cores per site"), ("rtt", "RTT axis")):
        if a.get(key) != b.get(key):
            out.append(f"{label}: A {show(a.get(key))}, B {show(b.get(key))}")
    ua, ub = a.get("underlay") or {}, b.get("underlay") or {}
    for key in UNDERLAY_KEYS:
        if ua.get(key) != ub.get(key):
            out.append(f"underlay {key.replace('_', ' ')}: A {show(ua.get(key))}, "
                       f"B {show(ub.get(key))}")
    if a.get("mtus") and b.get("mtus") and not set(a["mtus"]) & set(b["mtus"]):
        out.append(f"underlay MTUs: A {show(a['mtus'])}, B {show(b['mtus'])} (none in common)")
    ta, tb = a.get("tools") or {}, b.get("tools") or {}
    for tool in sorted(set(ta) & set(tb)):
        if ta[tool] != tb[tool]:
            out.append(f"{tool} version: A {show(ta[tool])}, B {show(tb[tool])}")
    for what in ("tunnels", "workloads"):
        da, db = a.get(what) or {}, b.get(what) or {}
        for label in [k for k in da if k in db]:
            if _unset_dropped(da[label]) != _unset_dropped(db[label]):
                out.append(f"{what[:-1]} {label}: A {show(da[label].get('params'))}, "
                           f"B {show(db[label].get('params'))}")
    return out
