"""Export to a Prometheus Pushgateway: one group per campaign, one gauge sample per case and
metric, in the text exposition format, over its HTTP API (PUT replaces the group, so pushing a
campaign again is idempotent).

Names: `tunbench_<metric>` (characters outside [a-zA-Z0-9_] become _); labels: campaign, case_id,
tunnel, kind, impl, workload, mtu, offloads, repeat, host, unit. The grouping key is
job="tunbench" and campaign=<folder name> (base64-encoded in the URL, so any name is safe).
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import SpecError, TunbenchError

JOB = "tunbench"
_BAD = re.compile(r"[^a-zA-Z0-9_]")
LABELS = ("campaign", "case_id", "tunnel", "kind", "impl", "workload", "mtu", "offloads",
          "repeat", "host", "unit")


def metric_name(name: str) -> str:
    n = "tunbench_" + _BAD.sub("_", name)
    return n


def _escape(v: Any) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(rows: Iterable[dict[str, Any]]) -> str:
    """The text format for tidy rows (query.rows): samples grouped by metric family, one
    TYPE line each (the format requires a family's samples to be contiguous)."""
    families: dict[str, list[str]] = {}
    for r in rows:
        if r.get("value") is None:
            continue
        labels = {**r, "campaign": Path(str(r["campaign"])).name}
        text = ",".join(f'{k}="{_escape(labels.get(k) if labels.get(k) is not None else "")}"'
                        for k in LABELS)
        families.setdefault(metric_name(str(r["metric"])), []).append(
            f"{{{text}}} {float(r['value'])!r}")
    out = []
    for name, samples in families.items():
        out.append(f"# HELP {name} tunbench case metric (see the unit label)")
        out.append(f"# TYPE {name} gauge")
        out += [name + s for s in samples]
    return "\n".join(out) + "\n"


def group_url(base: str, campaign: str) -> str:
    if not re.match(r"^https?://", base):
        raise SpecError(f"--pushgateway {base!r} is not an http(s) URL",
                        "e.g. --pushgateway http://127.0.0.1:9091")
    enc = base64.urlsafe_b64encode(campaign.encode()).decode()
    return f"{base.rstrip('/')}/metrics/job/{JOB}/campaign@base64/{enc}"


def push(base: str, campaign: str, rows: list[dict[str, Any]], timeout: float = 10.0) -> int:
    """PUT one campaign's samples; returns how many were sent. Raises TunbenchError with the
    gateway's own message when it refuses."""
    body = exposition(rows).encode()
    req = urllib.request.Request(group_url(base, campaign), data=body, method="PUT",
                                 headers={"Content-Type": "text/plain; version=0.0.4"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:   # noqa: S310 (http(s) only)
            resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()[:300]
        raise TunbenchError(f"pushgateway {base} refused campaign {campaign}: HTTP {exc.code} "
                            f"{detail}", "check the gateway's version and logs") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TunbenchError(f"pushgateway {base} not reachable: {reason}",
                            "is it running? (prometheus-pushgateway, default port 9091)") from None
    return sum(1 for r in rows if r.get("value") is not None)
