"""The SQLite store: schema, opening, and the idempotent import of one campaign folder.

One campaign is imported inside one transaction: either all its case and metric rows are
there or none are, so a crash (or SIGKILL) mid-import leaves the store as it was before that
campaign. A folder is identified by its resolved path and a hash of its JSON files: importing
an unchanged folder again changes nothing; a folder that changed (a resumed campaign) replaces
its rows; the same content under another path (a copy) is recognized and not duplicated.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..results.records import CampaignRecord, CaseRecord

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaign (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,          -- resolved result folder: the source of truth
    content_hash TEXT NOT NULL UNIQUE,  -- sha256 over index.json and cases/*.json
    name TEXT, host TEXT, created REAL, finished REAL, state TEXT,
    n_cases INTEGER NOT NULL, imported REAL NOT NULL, experiment TEXT);
CREATE TABLE IF NOT EXISTS environment (
    campaign_id INTEGER PRIMARY KEY REFERENCES campaign(id) ON DELETE CASCADE,
    hostname TEXT, kernel TEXT, machine TEXT, cpu_model TEXT, cpus INTEGER,
    tunbench TEXT, env TEXT);
CREATE TABLE IF NOT EXISTS "case" (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaign(id) ON DELETE CASCADE,
    case_id TEXT NOT NULL, tunnel TEXT NOT NULL, kind TEXT NOT NULL, impl TEXT,
    encrypts INTEGER, workload TEXT NOT NULL, workload_params TEXT, mtu INTEGER,
    offloads TEXT, repeat INTEGER, status TEXT NOT NULL, error TEXT,
    started REAL, ended REAL, rate TEXT,
    UNIQUE (campaign_id, case_id));
CREATE TABLE IF NOT EXISTS metric (
    case_row INTEGER NOT NULL REFERENCES "case"(id) ON DELETE CASCADE,
    name TEXT NOT NULL, value REAL, unit TEXT, higher_is_better INTEGER, bound TEXT,
    PRIMARY KEY (case_row, name));
CREATE TABLE IF NOT EXISTS schedule_run (
    id INTEGER PRIMARY KEY, schedule TEXT NOT NULL, slot REAL NOT NULL, started REAL,
    ended REAL, status TEXT NOT NULL, campaign_path TEXT, reason TEXT);
CREATE INDEX IF NOT EXISTS case_by_campaign ON "case"(campaign_id);
CREATE INDEX IF NOT EXISTS case_by_tunnel ON "case"(tunnel, workload);
CREATE INDEX IF NOT EXISTS metric_by_name ON metric(name);
"""


def default_path() -> Path:
    """$TUNBENCH_DB, else $XDG_DATA_HOME/tunbench/results.db (~/.local/share/...)."""
    env = os.environ.get("TUNBENCH_DB")
    if env == "off":
        raise SpecError("the results store is turned off (TUNBENCH_DB=off)",
                        "name one with --db FILE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tunbench" / "results.db"


def connect(path: Path | str | None = None, *, create: bool = True) -> sqlite3.Connection:
    """Open (and create, with its schema) the store. WAL: a reader (trend, query) never
    blocks a campaign being recorded, and a killed writer leaves the last commit intact."""
    p = Path(path) if path is not None else default_path()
    if str(p) != ":memory:":
        if not create and (not p.exists() or (p.is_file() and p.stat().st_size == 0)):
            # an empty file would open as a new store: a reader must not write one there
            raise SpecError(f"no results store at {p}" + (" (an empty file)" if p.exists()
                                                          else ""),
                            "import result folders first: tunbench db import DIR...")
        if p.exists() and p.is_dir():
            raise SpecError(f"--db {p} is a directory", "give the path of a .db file")
        if path is not None and not p.exists():   # one the user named: only the file is new
            from ..shell import check_file
            check_file(p, "--db")
        p.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(p), timeout=30.0, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        if str(p) != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(SCHEMA)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise SpecError(f"{p} is not a tunbench results store ({exc})",
                        "point --db at another file, or move this one away") from None
    _add_fingerprint_column(conn)
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                     (str(SCHEMA_VERSION),))
    elif int(row[0]) > SCHEMA_VERSION:
        conn.close()
        raise SpecError(f"{p} has store schema {row[0]}, newer than this tunbench "
                        f"({SCHEMA_VERSION})", "upgrade tunbench")
    return conn


def _add_fingerprint_column(conn: sqlite3.Connection) -> None:
    """campaign.fingerprint (JSON, results/fingerprint.py) came after schema 1: added to an
    older store in place; its rows stay NULL (the trend derives theirs from the experiment
    and environment, as compare does for a campaign that recorded none)."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(campaign)")}
    if "fingerprint" not in cols:
        conn.execute("ALTER TABLE campaign ADD COLUMN fingerprint TEXT")


def content_hash(root: Path) -> str:
    """sha256 over index.json and every cases/*.json (name and bytes, in name order)."""
    h = hashlib.sha256()
    files = [root / "index.json"] + sorted((root / "cases").glob("*.json"))
    for f in files:
        if f.exists():
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()


def read_campaign(root: Path) -> CampaignRecord:
    """A result folder as typed records, through the one reader (results/reader.py: tunnel
    display names, directions, sweep labels as the report names them). The one place the
    store reads result files."""
    from ..results import reader
    return reader.read_records(root)


@dataclass(frozen=True)
class Imported:
    path: str
    action: str        # "added", "replaced", "unchanged", "duplicate"
    cases: int
    metrics: int
    note: str = ""


def _slow_for_tests() -> float:
    """Seconds to pause after each case row: only for the crash-mid-import test, which needs
    the importer to be inside a transaction when it is killed."""
    try:
        return float(os.environ.get("TUNBENCH_DB_TEST_SLOW_CASE", "0"))
    except ValueError:
        return 0.0


def import_campaign(conn: sqlite3.Connection, root: Path) -> Imported:
    """Upsert one campaign folder in one transaction (see the module docstring)."""
    root = Path(root).resolve()
    if not (root / "index.json").exists():
        raise SpecError(f"{root} has no index.json", "point at a tunbench result folder")
    digest = content_hash(root)
    known = conn.execute("SELECT path, content_hash FROM campaign WHERE path=? OR "
                         "content_hash=?", (str(root), digest)).fetchall()
    for path, h in known:
        if h == digest:
            if path == str(root):
                return Imported(str(root), "unchanged", 0, 0)
            return Imported(str(root), "duplicate", 0, 0, f"same content as {path}")
    camp = read_campaign(root)
    slow = _slow_for_tests()
    conn.execute("BEGIN IMMEDIATE")
    try:
        replaced = conn.execute("DELETE FROM campaign WHERE path=?", (str(root),)).rowcount
        cid = _insert_campaign(conn, root, digest, camp)
        n_metrics = 0
        for case in camp.cases:
            n_metrics += _insert_case(conn, cid, case, camp)
            if slow:
                time.sleep(slow)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Imported(str(root), "replaced" if replaced else "added", len(camp.cases),
                    n_metrics)


def _insert_campaign(conn: sqlite3.Connection, root: Path, digest: str,
                     camp: CampaignRecord) -> int:
    env = camp.env
    cur = conn.execute(
        "INSERT INTO campaign (path, content_hash, name, host, created, finished, state, "
        "n_cases, imported, experiment, fingerprint) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (str(root), digest, camp.experiment.get("name") or root.name, env.get("hostname"),
         camp.created, camp.finished, camp.index.get("state"), len(camp.cases),
         time.time(), json.dumps(camp.experiment, sort_keys=True, default=str),
         json.dumps(camp.fingerprint, sort_keys=True, default=str)))
    cid = int(cur.lastrowid or 0)
    conn.execute("INSERT INTO environment VALUES (?,?,?,?,?,?,?,?)",
                 (cid, env.get("hostname"), env.get("kernel"), env.get("machine"),
                  env.get("cpu_model"), env.get("cpus"), env.get("tunbench"),
                  json.dumps(env, sort_keys=True, default=str)))
    return cid


def _insert_case(conn: sqlite3.Connection, cid: int, case: CaseRecord,
                 camp: CampaignRecord) -> int:
    t, w = case.tunnel, case.workload
    fixed = camp.experiment.get("rate")   # a list is the rate axis: each case has its own
    rate = case.rate or (fixed if isinstance(fixed, str) else None)
    cur = conn.execute(
        'INSERT INTO "case" (campaign_id, case_id, tunnel, kind, impl, encrypts, workload, '
        "workload_params, mtu, offloads, repeat, status, error, started, ended, rate) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (cid, case.id, t.label, t.kind, t.impl, int(t.encrypts), w.name,
         json.dumps(w.params, sort_keys=True), case.mtu, case.offloads, case.repeat,
         case.status, case.error, case.started, case.ended,
         None if rate is None else str(rate)))
    row = int(cur.lastrowid or 0)
    metrics = [(row, name, m.value, m.unit, int(m.higher_is_better), m.bound)
               for name, m in case.metrics.items()]
    conn.executemany("INSERT INTO metric VALUES (?,?,?,?,?,?)", metrics)
    return len(metrics)


def campaign_dirs(paths: Iterable[Path]) -> list[Path]:
    """Result folders named directly, or found one or two levels below (results/<ts>/)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.name == "index.json" and p.is_file():   # the campaign's index, named directly
            p = p.parent
        if (p / "index.json").exists():
            out.append(p)
        elif p.exists() and not p.is_dir():
            raise SpecError(f"{p} is a file, not a result folder",
                            "name the folder that holds index.json (results/<timestamp>)")
        elif p.is_dir():
            found = sorted(q.parent for q in p.glob("*/index.json")) or \
                sorted(q.parent for q in p.glob("*/*/index.json"))
            if not found:
                raise SpecError(f"{p} holds no tunbench result folder (no index.json in it "
                                "or below)", "point at results/<timestamp> folders")
            out += found
        else:
            raise SpecError(f"{p} does not exist", "point at tunbench result folders")
    return list(dict.fromkeys(out))


def import_many(conn: sqlite3.Connection, dirs: list[Path],
                progress: Callable[[int, int, Imported], None] | None = None) -> list[Imported]:
    out = []
    for i, d in enumerate(dirs, 1):
        res = import_campaign(conn, d)
        out.append(res)
        if progress:
            progress(i, len(dirs), res)
    return out


def record_schedule_run(conn: sqlite3.Connection, schedule: str, slot: float, status: str,
                        *, started: float | None = None, ended: float | None = None,
                        campaign: str | None = None, reason: str | None = None) -> None:
    conn.execute("INSERT INTO schedule_run (schedule, slot, started, ended, status, "
                 "campaign_path, reason) VALUES (?,?,?,?,?,?,?)",
                 (schedule, slot, started, ended, status, campaign, reason))


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0])
            for t in ("campaign", "environment", "case", "metric", "schedule_run")}
