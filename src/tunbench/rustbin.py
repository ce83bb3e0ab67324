"""The project's own Rust binaries (loadgen/: the UDP load generator, the RPC generator, the
aggregating tunnel's datapath), built together by `make loadgen`: one way to find each and to
say how to build it when it is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import proc
from .capabilities import Missing
from .errors import CommandFailed, UnavailableError

if TYPE_CHECKING:
    from .testbed.base import Site, Testbed

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "loadgen" / "target" / "release"


def build_fix(env: str) -> str:
    return ("build it: make loadgen (needs Rust >= 1.85: curl https://sh.rustup.rs | sh), "
            f"or point {env} at the binary")


def find(binary: str, env: str) -> str | None:
    """$<env>, else <repo>/loadgen/target/release/<binary>, else PATH."""
    given = os.environ.get(env)
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    built = RELEASE / binary
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return proc.which(binary)


def missing(binary: str, env: str, what: str = "") -> Missing | None:
    """None when `binary` is found; else why not, with the build command. `what` names it for
    a reader when the binary's name says little (e.g. "the aggregating datapath")."""
    if find(binary, env):
        return None
    given = os.environ.get(env)
    why = (f"{env}={given} is not an executable file" if given else
           f"{what or binary} not built (looked in ${env}, loadgen/target/release, PATH)")
    return Missing(f"tool {binary}", why, build_fix(env))


def on_site(tb: Testbed, site: Site, binary: str, env: str, note: str, what: str = "") -> str:
    """`binary` as `site` runs it: our build on this host; on a remote host its own copy when
    it has one on PATH, else ours copied into the case directory there (mode 0700, removed with
    it) when the architectures match. One copy per site and binary for the testbed's life; the
    testbed's record says where under `note` (e.g. "loadgen_copied_to": {site: path})."""
    local = find(binary, env)
    if not site.remote:
        if local is None:
            m = missing(binary, env, what)
            raise UnavailableError(m.one_line() if m else binary, build_fix(env))
        return local
    key = f"{binary}@{site.name}"
    if key in tb.shipped:
        return tb.shipped[key]
    r = site.run(["sh", "-c", 'command -v "$1"', "tb-which", binary], check=False, timeout=10)
    path = r.stdout.strip() if r.ok else ""
    if not path:
        if local is None:
            raise UnavailableError(f"{binary} is neither on {site.host} nor built here",
                                   build_fix(env))
        theirs = site.run(["uname", "-m"], timeout=10).stdout.strip()
        if theirs != os.uname().machine:
            raise CommandFailed(f"{binary} is not installed on {site.host} ({theirs}) and ours "
                                f"is built for {os.uname().machine}", "build it there (make "
                                "loadgen) and put it on PATH")
        path = str(tb.site_dir(site) / binary)
        site.write_file(tb.ledger, Path(path), Path(local).read_bytes(), mode=0o700)
        tb.notes.setdefault(note, {})[site.name] = path
    tb.shipped[key] = path
    return path


def json_result(text: str, binary: str, role: str) -> dict[str, Any]:
    """The last JSON object line `binary` printed as `role` ("send", "recv", "client", ...):
    each of them ends its output with one `{"tool": binary, "role": role, ...}` line."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and data.get("tool") == binary and data.get("role") == role:
                return data
    raise CommandFailed(f"{binary} {role} printed no JSON result",
                        "see the case's error_log for its stderr")
