"""The one reader of result folders: every consumer (report, compare, trend, the store,
exports, resume) loads a campaign through here, so damaged or partial folders are handled in
one place. `read_records` gives the typed records (results/records.py) every consumer reads;
`read_campaign` the checked, upgraded documents (the runner's resume, and what the records
are built from).

- A file that is not valid JSON (truncated by a full disk, edited by hand) is one line naming
  it, exit 2, never a traceback.
- `format` must match; a `format_version` newer than this build is refused with a clear line;
  an older one goes through `UPGRADERS` (version -> function returning the next version's
  document), the hook where a later result format adds its upgrader, as flent's
  unserialise_compat does.
- A case the index lists as recorded but whose file is gone is reported in `missing`, not
  dropped in silence; cases the index lists as pending and a state other than `complete`
  make the campaign incomplete, with the exact command that resumes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SpecError
from . import records
from . import upgrade as _upgrade
from .model import CASE_FORMAT, FORMAT_VERSION, INDEX_FORMAT

RECORDED = ("ok", "failed", "skipped")
Upgrader = Callable[[dict[str, Any]], dict[str, Any]]
# format_version N -> function turning a version-N document (index or case) into version N+1
# (results/upgrade.py: v1 -> v2, the metric names decoded into base + dims)
UPGRADERS: dict[int, Upgrader] = dict(_upgrade.UPGRADERS)


class ResultError(SpecError):
    """A result folder or file that cannot be read as it is (exit 2, nothing changed)."""


@dataclass
class CampaignFolder:
    root: Path
    index: dict[str, Any]
    cases: list[dict[str, Any]]            # case documents, each with "_path" (relative)
    missing: list[str] = field(default_factory=list)   # listed as recorded, file gone
    pending: list[str] = field(default_factory=list)   # listed, never recorded

    @property
    def state(self) -> str:
        return str(self.index.get("state") or "unknown")

    @property
    def incomplete(self) -> bool:
        return self.state != "complete" or bool(self.pending)

    @property
    def resume_command(self) -> str:
        return f"tunbench run --resume {self.root}"

    def problems(self) -> list[str]:
        """What a reader must be told before trusting the figures, one line each."""
        out = [f"case {cid} is listed in {self.root / 'index.json'} but its file "
               f"{self.root / 'cases' / (cid + '.json')} is missing" for cid in self.missing]
        if self.incomplete:
            out.append(f"campaign is incomplete (state {self.state}, {len(self.pending)} "
                       f"pending case(s)); continue it with `{self.resume_command}`")
        return out


def read_json(path: Path, expected: str) -> dict[str, Any]:
    """One result file, checked and upgraded to FORMAT_VERSION."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultError(f"{path} does not exist", "point at a tunbench result folder"
                          ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"{path} cannot be read ({exc})", "check the file and its "
                          "permissions") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        what = "is empty" if not text.strip() else (
            f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}"
            + ("; truncated?" if exc.pos >= len(text.rstrip()) - 1 else "") + ")")
        hint = ("restore it from a copy, or delete it and run that case again with "
                f"`tunbench run --resume {path.parent.parent}`" if expected == CASE_FORMAT
                else "restore it from a copy")
        raise ResultError(f"{path} {what}", hint) from None
    if not isinstance(doc, dict):
        raise ResultError(f"{path} is not a {expected} file (no JSON object)",
                          "point at a tunbench result folder")
    return upgrade(doc, expected, path)


def upgrade(doc: dict[str, Any], expected: str, path: Path) -> dict[str, Any]:
    if doc.get("format") != expected:
        raise ResultError(f"{path} is not a {expected} file (format "
                          f"{doc.get('format')!r})", "point at a tunbench result folder")
    version = doc.get("format_version", 0)
    if not isinstance(version, int) or version < 0:
        raise ResultError(f"{path} has an invalid format_version {version!r}",
                          "restore the file from a copy")
    if version > FORMAT_VERSION:
        raise ResultError(f"{path} has format version {version}, newer than this tunbench "
                          f"reads ({FORMAT_VERSION})", "upgrade tunbench to read it")
    while version < FORMAT_VERSION:
        step = UPGRADERS.get(version)
        if step is None:
            raise ResultError(f"{path} has format version {version}, which this tunbench "
                              "cannot upgrade", "read it with the tunbench that wrote it")
        doc = step(doc)
        version += 1
        doc["format_version"] = version
    return _upgrade.fill_v2(doc)


def read_index(root: Path) -> dict[str, Any]:
    path = root / "index.json"
    if not path.exists():
        what = "does not exist" if not root.exists() else "has no index.json"
        raise ResultError(f"{root} {what}", "point at a tunbench result folder: the DIR a "
                          "`tunbench run` wrote")
    return read_json(path, INDEX_FORMAT)


def read_campaign(root: Path) -> CampaignFolder:
    """Index and every case file, in the index's order (files the index does not list, from
    an older tunbench, come last)."""
    index = read_index(root)
    listed = [c for c in index.get("cases") or [] if isinstance(c, dict) and c.get("id")]
    folder = CampaignFolder(root, index, [])
    seen: set[Path] = set()
    for entry in listed:
        path = root / str(entry.get("file") or f"cases/{entry['id']}.json")
        seen.add(path.resolve())
        if path.exists():
            folder.cases.append(_case(root, path))
        elif entry.get("status") in RECORDED:
            folder.missing.append(str(entry["id"]))
        else:
            folder.pending.append(str(entry["id"]))
    for path in sorted((root / "cases").glob("*.json")):
        if path.resolve() not in seen:
            folder.cases.append(_case(root, path))
    return folder


def _case(root: Path, path: Path) -> dict[str, Any]:
    doc = read_json(path, CASE_FORMAT)
    doc["_path"] = str(path.relative_to(root))
    return doc


def read_records(root: Path, *, sweeps: bool = True) -> records.CampaignRecord:
    """A campaign folder as typed records (results/records.py): every case named as the
    tables show it (tunnel display name, direction, sweep point), with the folder's missing
    and pending cases. `sweeps=False` keeps a workload swept across cases as one scenario."""
    folder = read_campaign(root)
    return records.CampaignRecord(root, folder.index, records.named(folder.cases, sweeps=sweeps),
                                  folder.missing, folder.pending)


def experiment_labels(index: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(tunnel labels, workload labels) the experiment asked for, whether or not any case of
    them was recorded: the campaign header of an interrupted run still says what it was."""
    exp = index.get("experiment") or {}
    tuns = [str(t.get("label") or t.get("kind")) for t in exp.get("tunnels") or []]
    wls = [str(w.get("label") or w.get("name")) for w in exp.get("workloads") or []]
    return list(dict.fromkeys(tuns)), list(dict.fromkeys(wls))
