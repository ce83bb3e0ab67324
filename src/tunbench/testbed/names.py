"""Names of everything tunbench creates: a prefix, a run id, and a fit in IFNAMSIZ.

Namespaces are `tb-<rid>-a` / `tb-<rid>-b`; links are `tb<rid><suffix>`. `tunbench cleanup`
sweeps only names of this shape.
"""

from __future__ import annotations

import re
import secrets

PREFIX = "tb"
IFNAMSIZ = 15  # usable characters of an interface name
RUN_ID_LEN = 5
NETNS_RE = re.compile(rf"^{PREFIX}-[0-9a-f]{{{RUN_ID_LEN}}}-[a-z0-9]+$")
LINK_RE = re.compile(rf"^{PREFIX}[0-9a-f]{{{RUN_ID_LEN}}}[a-z0-9]*$")


def is_run_id(text: str) -> bool:
    return re.fullmatch(rf"[0-9a-f]{{{RUN_ID_LEN}}}", text) is not None


def new_run_id(taken: set[str] | None = None) -> str:
    while True:
        rid = secrets.token_hex(4)[:RUN_ID_LEN]
        if not taken or rid not in taken:
            return rid


def netns_name(run_id: str, site: str) -> str:
    return f"{PREFIX}-{run_id}-{site}"


def link_name(run_id: str, suffix: str) -> str:
    name = f"{PREFIX}{run_id}{suffix}"
    if len(name) > IFNAMSIZ:
        raise ValueError(f"interface name {name!r} is longer than {IFNAMSIZ} characters")
    return name


def is_ours_netns(name: str) -> bool:
    return bool(NETNS_RE.match(name))


def is_ours_link(name: str) -> bool:
    return bool(LINK_RE.match(name))
