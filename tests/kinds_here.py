"""Whether this machine can run a tunnel kind: the driver's own requirements (kernel options,
tools), one line. Live tests of a kind skip with that line when it cannot run here (kernels
differ: a minimal kernel may lack SRv6's seg6 lwtunnel, Geneve or GRE; the VM lab's guest
has them). The remote tier's hosts are namespaces on this kernel: the same answer."""

from __future__ import annotations

from typing import Any

import pytest

from tunbench import tunnels


def lacks(kind: str, **raw: Any) -> str | None:
    """What this machine lacks for `kind` with parameters `raw`, one line; None: nothing."""
    drv = tunnels.get(kind)
    missing = drv.requirements(drv.parse_params(raw))
    return "; ".join(m.one_line() for m in missing) or None


def skip_unless_here(kind: str, **raw: Any) -> None:
    """Skip the calling test, naming the variant (e.g. "wireguard (go)") and what is
    missing, when `kind` with parameters `raw` cannot run here."""
    why = lacks(kind, **raw)
    if why:
        drv = tunnels.get(kind)
        pytest.skip(f"{drv.display(drv.parse_params(raw))} cannot run on this machine: {why}")
