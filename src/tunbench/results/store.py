"""Writing and reading a campaign folder: index.json + cases/<case id>.json, atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .model import FORMAT_VERSION, INDEX_FORMAT


def write_json_atomic(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CampaignStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cases_dir = root / "cases"

    @property
    def index_path(self) -> Path:
        return self.root / "index.json"

    def case_path(self, case_id: str) -> Path:
        return self.cases_dir / f"{case_id}.json"

    def write_index(self, index: dict[str, Any]) -> None:
        write_json_atomic(self.index_path, {"format": INDEX_FORMAT,
                                            "format_version": FORMAT_VERSION, **index})

    def write_case(self, case_id: str, doc: dict[str, Any]) -> Path:
        path = self.case_path(case_id)
        write_json_atomic(path, doc)
        return path

    def read_index(self) -> dict[str, Any]:
        """The index, checked by the one reader (results/reader.py)."""
        from .reader import read_index
        return read_index(self.root)

    def read_cases(self) -> list[dict[str, Any]]:
        """Every recorded case, through the one reader (results/reader.py)."""
        from .reader import read_campaign
        return read_campaign(self.root).cases


def rewrite(src: Path, dst: Path) -> Path:
    """Campaign `src`, read (and upgraded) by the one reader, written at `dst` in the current
    format, case files at the same relative paths. `src` is never changed; refuses an
    existing `dst` so nothing is overwritten."""
    from .reader import ResultError, read_campaign
    if dst.exists():
        raise ResultError(f"{dst} exists", "name a new folder to write the upgraded copy to")
    folder = read_campaign(src)
    store = CampaignStore(dst)
    index = {k: v for k, v in folder.index.items() if k not in ("format", "format_version")}
    store.write_index(index)
    for doc in folder.cases:
        doc = dict(doc)
        write_json_atomic(dst / doc.pop("_path"), doc)
    return dst
