"""The project's own Rust binaries (loadgen/: the UDP load generator, the RPC generator, the
aggregating tunnel's datapath), built together by `make loadgen`: one way to find each and to
say how to build it when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

from . import proc
from .capabilities import Missing

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
