"""The typed read side (results/records.py, reader.read_records) on every recorded campaign
under tests/data: each record says what its case document says, named as the tables show it;
the exports write the records in the documented columns, the same in CSV, Parquet and JSON
lines; docs/results.md names every field of every record."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path

import pytest

from tunbench.report import export
from tunbench.results import fingerprint, reader, records
from tunbench.results.model import MetricRecord

DATA = Path(__file__).resolve().parents[1] / "data"
ROOTS = sorted(p.parent for p in DATA.rglob("index.json")
               if json.loads(p.read_text()).get("format") == "tunbench-campaign")
DOC = Path(__file__).resolve().parents[2] / "docs" / "results.md"


@pytest.mark.parametrize("root", ROOTS, ids=[r.name for r in ROOTS])
def test_records_say_what_the_documents_say(root: Path) -> None:
    camp = reader.read_records(root)
    folder = reader.read_campaign(root)
    docs = records.name_wan(records.name_cores(
        records.name_directions(records.name_tunnels(folder.cases))))
    records.split_sweeps(docs)
    assert len(camp.cases) == len(docs) > 0
    assert camp.fingerprint == fingerprint.of_index(folder.index)
    assert camp.name == (folder.index.get("experiment") or {}).get("name", root.name)
    for rec, doc in zip(camp.cases, docs, strict=True):
        c = doc["case"]
        assert (rec.id, rec.status, rec.mtu, rec.offloads, rec.repeat) == (
            c["id"], doc["status"], c["mtu"], c["offloads"]["name"], c["repeat"])
        assert rec.tunnel.label == c["tunnel"]["label"] == rec.tunnel.display
        assert rec.tunnel.kind == c["tunnel"]["kind"]
        assert rec.tunnel.carries is not None and "tcp" in rec.tunnel.carries
        assert rec.scenario == (c["workload"]["name"], c["mtu"], c["offloads"]["name"])
        assert rec.workload.direction == records.direction(c["workload"].get("params") or {})
        assert set(rec.metrics) == set(doc["metrics"])
        for key, m in rec.metrics.items():
            raw = doc["metrics"][key]
            v = raw.get("value")
            assert m.value == (None if v is None or not math.isfinite(v) else v)
            assert (m.base, m.unit, m.dims) == (raw["base"], raw["unit"], raw["dims"])
            assert m.direction == ("higher" if raw["higher_is_better"] else "lower")


def test_names_come_from_the_records_not_the_raw_labels() -> None:
    """A v1 campaign: tunnels named with their implementation; a swept workload split into
    one scenario per value, kept together with sweeps=False."""
    v1 = reader.read_records(DATA / "campaigns" / "v1-impls")
    assert "wireguard (go)" in {r.tunnel.label for r in v1.cases}
    assert {r.tunnel.given_label for r in v1.cases if r.tunnel.kind == "wireguard"} == \
        {"wireguard"}
    split = reader.read_records(DATA / "campaigns" / "sweep")
    whole = reader.read_records(DATA / "campaigns" / "sweep", sweeps=False)
    assert len({r.workload.name for r in split.cases}) > 1
    assert {r.workload.name for r in whole.cases} == {r.workload.base for r in split.cases}
    assert all(r.workload.sweep for r in split.cases)


def test_exports_have_the_documented_columns_in_every_format(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"campaign": str(r), **row} for r in ROOTS[:3]
            for row in export.tidy_rows(reader.read_records(r).cases)]
    cols = export.columns(rows)
    assert cols == ["campaign", *export.COLUMNS]
    table = re.search(r"## Exports\n(.*?)\nFormats", DOC.read_text(), re.S)
    assert table is not None
    documented = [c for line in table.group(1).splitlines() if line.startswith("| `")
                  for c in re.findall(r"`([a-z_]+)`", line.split("|")[1])]
    assert documented == cols
    from_csv = list(csv.DictReader(io.StringIO(export.to_csv(rows))))
    from_jsonl = [json.loads(line) for line in export.to_jsonl(rows).splitlines()]
    got = pq.read_table(export.write_parquet(rows, tmp_path / "r.parquet")).to_pylist()
    assert [list(r) for r in (from_csv[0], from_jsonl[0], got[0])] == [cols] * 3
    assert len(from_csv) == len(from_jsonl) == len(got) == len(rows)
    for a, b, c in zip(from_csv, from_jsonl, got, strict=True):
        assert b == c                                   # JSON lines and Parquet: typed alike
        assert a == {k: "" if v is None else str(v) for k, v in b.items()}   # CSV: text


def test_docs_name_every_field_of_every_record() -> None:
    text = DOC.read_text()
    section = text[text.index("## Typed records"):text.index("## Exports")]
    for cls in (records.CampaignRecord, records.CaseRecord, records.TunnelIdentity,
                records.WorkloadIdentity, MetricRecord):
        row = next(line for line in section.splitlines() if line.startswith(f"| `{cls.__name__}`"))
        for f in dataclasses.fields(cls):
            if f.name != "doc":   # the document behind the record: not for consumers
                assert f"`{f.name}`" in row, (cls.__name__, f.name)
