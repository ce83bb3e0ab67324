"""The one place user input is read: files the user names and comma-list flags.

Every way such input can be unusable becomes one SpecError (exit 2) naming the file or flag
and what is wrong, before anything on the system is changed; nothing here raises OSError,
UnicodeDecodeError or a parser's own exception. New input surfaces (files, list flags) read
through these functions so the same bar holds for them from their first day.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from .errors import SpecError

MAX_FILE_BYTES = 1 << 20   # an experiment file is a page of TOML; 1 MiB is plenty


def load_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file the user named: every way a path can fail to be a TOML document (missing,
    a directory, unreadable, too large, not UTF-8 text, not TOML) becomes one SpecError
    naming the file and what is wrong, never an OSError or decode traceback."""
    return parse_toml(read_text(path, what), path)


def read_text(path: Path, what: str) -> str:
    """A user-named text file as str, or one SpecError naming it and the problem."""
    try:
        with open(path, "rb") as f:
            if stat.S_ISCHR(os.fstat(f.fileno()).st_mode) or stat.S_ISBLK(
                    os.fstat(f.fileno()).st_mode):
                raise SpecError(f"{what} {path} is a device, not a file", "name a .toml file")
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{what} {path} does not exist", "check the path") from None
    except IsADirectoryError:
        raise SpecError(f"{what} {path} is a directory", "name a .toml file") from None
    except PermissionError:
        raise SpecError(f"{what} {path} is not readable (permission denied)",
                        "check its permissions") from None
    except OSError as exc:
        raise SpecError(f"{what} {path} cannot be read: {exc.strerror or exc}",
                        "check the path") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{what} {path} is larger than {MAX_FILE_BYTES >> 20} MiB",
                        "is this the right file?")
    return decode_utf8(raw, f"{what} {path}")


_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def decode_utf8(raw: bytes, what: str) -> str:
    """UTF-8 text (a UTF-8 BOM is tolerated, as editors write it); UTF-16/32 and binary
    bytes are named as such, with the offset of the first bad byte."""
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            raise SpecError(f"{what} is {enc} text, not UTF-8",
                            "save it as UTF-8, the encoding TOML requires")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} is not UTF-8 text (byte {exc.start}: "
                        f"{raw[exc.start:exc.start + 1]!r})",
                        "an experiment file is UTF-8 TOML; is this the right file?") from None
    if "\x00" in text:
        raise SpecError(f"{what} contains a NUL byte (offset {text.index(chr(0))})",
                        "an experiment file is UTF-8 TOML; is this the right file?")
    return text


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {_first_line(str(exc))}",
                        "fix the syntax at that line") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid TOML: nested too deeply",
                        "an experiment needs at most a few levels of tables") from None


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else text


def split_list(flag: str, text: str, *, unique: bool = True) -> list[str]:
    """A comma-separated flag value -> its elements; empty elements (`a,,b`, `,`) and, where
    `unique`, duplicates are refused naming the flag: the one place list flags are split."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip():
        raise SpecError(f"{flag} needs a value", f"e.g. {flag} A,B")
    if any(not p for p in parts):
        raise SpecError(f"{flag} {text!r} has an empty element",
                        "separate values with single commas, no leading or trailing comma")
    if unique:
        dup = sorted({p for p in parts if parts.count(p) > 1})
        if dup:
            raise SpecError(f"{flag} {text!r} names {', '.join(dup)} twice",
                            "list each value once")
    return parts
