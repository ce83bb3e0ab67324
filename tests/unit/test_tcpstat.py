"""A site's TCP counters (metrics/tcpstat.py) from /proc/net/snmp and /proc/net/netstat as
captured in the two sites of a native iperf3 run on veth (3 s, client on CPU 0, server on
CPU 1; tests/data/tcpstat): the retransmitted segments, those the receiver D-SACKed, the
segments queued out of order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench.metrics import tcpstat

DATA = Path(__file__).parent.parent / "data" / "tcpstat"


def _read(name: str) -> dict[str, int]:
    return tcpstat.parse((DATA / f"{name}.txt").read_text())


def _field(name: str, table: str, field: str) -> int:
    """The counter as the captured file has it, found by hand: the header line's position."""
    lines = [ln.split() for ln in (DATA / f"{name}.txt").read_text().splitlines()
             if ln.startswith(f"{table}:")]
    return int(lines[1][lines[0].index(field)])


@pytest.mark.parametrize("name", ["a-before", "a-after", "b-before", "b-after"])
def test_every_field_read_from_its_own_table(name: str) -> None:
    got = _read(name)
    assert got == {key: _field(name, table, field)
                   for (table, field), key in tcpstat.FIELDS.items()}


def test_the_run_in_counters() -> None:
    a = tcpstat.delta(_read("a-before"), _read("a-after"))
    b = tcpstat.delta(_read("b-before"), _read("b-after"))
    # a sent the data: a's retransmits, D-SACKed by b; b queued the segments that came late
    assert a["out_segs"] > b["out_segs"] and a["retrans_segs"] > 0
    assert 0 < a["dsack_recv_segs"] <= a["retrans_segs"]
    assert b["retrans_segs"] == 0 and b["ofo_queued"] > 0
    pct = tcpstat.spurious_pct({"a": a, "b": b})
    assert pct == pytest.approx(100 * a["dsack_recv_segs"] / a["retrans_segs"])


def test_nothing_retransmitted_or_no_counters_is_no_figure() -> None:
    zero = {"retrans_segs": 0, "dsack_recv_segs": 0}
    assert tcpstat.spurious_pct({"a": zero, "b": zero}) is None
    assert tcpstat.spurious_pct({"a": {}, "b": {}}) is None
    assert tcpstat.spurious_pct({}) is None


def test_a_kernel_without_a_field_leaves_it_out() -> None:
    text = ("Tcp: RtoAlgorithm RetransSegs OutSegs\nTcp: 1 7 90\n"
            "TcpExt: SyncookiesSent\nTcpExt: 0\n")
    assert tcpstat.parse(text) == {"retrans_segs": 7, "out_segs": 90}
    assert tcpstat.delta({"retrans_segs": 7}, {"retrans_segs": 9, "out_segs": 3}) == \
        {"retrans_segs": 2}
