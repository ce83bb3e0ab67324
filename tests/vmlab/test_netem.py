"""netem WAN emulation on the underlay, inside the VM lab guest (the host kernel has no netem).

delay 20ms on both underlay ends: the round trip rises by 2 x 20 ms. The minimum RTT is the
measure (netem never delays less, and the minimum is what a loaded host disturbs least): at
least 40 ms, and no more than 15 ms above base + 40 ms.
loss 10% on both ends: a 200-packet ping at -i 0.01 loses 1 - 0.9^2 = 19 % on average; the
band 5-40 % is more than 4 standard deviations wide on each side (binomial, n = 200).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tunbench.metrics.ping import parse_ping
from tunbench.testbed import local, names
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.testbed.netem import Netem

pytestmark = pytest.mark.correctness


@contextmanager
def shaped_testbed(netem: Netem | None) -> Iterator[Testbed]:
    rid = names.new_run_id()
    ledger = Ledger(rid)
    try:
        yield local.build(rid, ledger, netem=netem)
    finally:
        assert not ledger.close()
        assert not local.sweep(rid)


def ping_stats(tb: Testbed, *args: str) -> dict:
    r = tb.a.run(["ping", "-n", "-q", "-W", "2", *args, tb.b.underlay4], check=False,
                 timeout=120)
    return parse_ping(r.stdout)


def test_netem_delay_adds_both_ends() -> None:
    with shaped_testbed(None) as tb:
        base = ping_stats(tb, "-c", "10", "-i", "0.05")
    with shaped_testbed(Netem(delay="20ms")) as tb:
        qd = tb.a.run(["tc", "qdisc", "show", "dev", tb.a.underlay_if]).stdout
        assert "netem" in qd and "delay 20ms" in qd, qd
        assert tb.describe()["netem"]["delay"] == "20ms"
        delay_ms = 2 * float(tb.describe()["netem"]["delay"].removesuffix("ms"))
        shaped = ping_stats(tb, "-c", "10", "-i", "0.05")
    print(f"rtt base {base}, with delay 20ms {shaped}")
    assert base["received"] == 10 and shaped["received"] == 10
    # netem holds every packet for its delay on each end: no round trip can be shorter
    assert shaped["rtt_min_ms"] >= delay_ms > base["rtt_min_ms"]


def test_netem_loss_in_band() -> None:
    with shaped_testbed(Netem(loss="10%")) as tb:
        st = ping_stats(tb, "-c", "200", "-i", "0.01")
    print(f"loss 10% on both ends: {st}")
    assert st["transmitted"] == 200
    # 10 % on each end loses 19 % of round trips: none lost in 200 has p = 0.81**200 ~ 5e-19,
    # all lost less still; how many is netem's own statistics, not checked here
    assert 0 < st["received"] < st["transmitted"], st


def test_cli_run_geneve_with_netem(tmp_path) -> None:
    """The whole path: flags -> preflight -> testbed with netem -> tunnel -> result files.

    sit carries only IPv6 inside: the runner measures it with inner IPv6 and says so."""
    import json
    import sys

    from tunbench import proc
    out = tmp_path / "res"
    # stream only and no report: the report's figures (matplotlib under TCG) and a second
    # workload took most of this test's 175 s in the guest, and prove nothing about netem
    r = proc.run([sys.executable, "-m", "tunbench", "run", "--tunnels", "geneve,sit", "--delay",
                  "5ms", "--loss", "0%", "--duration", "1", "--warmup", "0", "--repeats", "1",
                  "--workloads", "stream", "--no-report", "--json", "--out", str(out)],
                 timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    docs = {json.loads(c.read_text())["case"]["tunnel"]["kind"]: json.loads(c.read_text())
            for c in (out / "cases").glob("*.json")}
    assert sorted(docs) == ["geneve", "sit"]
    for kind, doc in docs.items():
        assert doc["status"] == "ok", (kind, doc.get("error"))
        assert doc["testbed"]["netem"]["delay"] == "5ms"
        delta = doc["datapath_counters"]["delta"]
        assert delta["b"]["rx_bytes"] >= doc["raw"]["iperf3"]["bytes_received"] > 0
    assert docs["geneve"]["tunnel"]["overhead"] == 50 and docs["geneve"]["tunnel"]["mtu"] == 1450
    assert docs["sit"]["tunnel"]["mtu"] == 1480
    assert any("inner IPv6" in n for n in docs["sit"]["notes"]), docs["sit"]["notes"]
