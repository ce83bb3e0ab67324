"""Shell conventions every command follows (issue 30): a stdout closed early (`| head`, a
pager quit) ends quietly with the status of a SIGPIPE-terminated tool, and every output path
is checked before any work starts (one line, exit 2, nothing created outside the named path).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console as _RichConsole

from .errors import SpecError

# what a shell reports for a tool ended by SIGPIPE (head closed the pipe): 128 + 13
EXIT_PIPE = 128 + signal.SIGPIPE


class Console(_RichConsole):
    """rich's Console, except that a closed stdout raises BrokenPipeError (cli.dispatch ends
    quietly with EXIT_PIPE) instead of rich's own SystemExit(1), which reads as "regression"
    in `compare A B | head`."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("stdout closed")


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):   # no real stdout (captured in a test): nothing to do
        pass


def _where(path: Path, flag: str) -> str:
    return f"{flag} {path}" if flag else str(path)


@contextlib.contextmanager
def _unusable(where: str) -> Iterator[None]:
    """An OSError while looking at the path (a component not searchable, a name too long)
    is one line, exit 2, too."""
    try:
        yield
    except OSError as exc:
        raise SpecError(f"{where} cannot be used: {exc.strerror or exc}",
                        "choose another path") from None


def _can_create(path: Path, where: str, what: str) -> None:
    """PATH (absent) can be created in its parent folder, which exists: never at / by
    accident (`--out "$DIR/x"` with DIR unset), never with its parents."""
    parent = path.absolute().parent
    if parent == Path(parent.anchor):
        raise SpecError(f"{where} would create a {what} at the filesystem root",
                        "create it first if that is meant, or choose another path")
    if not parent.exists():
        raise SpecError(f"{where}: its parent folder {parent} does not exist",
                        f"create it first (mkdir -p {parent}) or choose another path")
    if not parent.is_dir():
        raise SpecError(f"{where}: {parent} is a file, not a folder", "choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"{where} cannot be created: {parent} is not writable",
                        "choose a folder you can write to")


def check_dir(path: Path, flag: str, *, create: bool = True) -> None:
    """PATH can be (or become) the folder the user named: a file there, a missing parent or
    no permission is one line, exit 2, before anything is written. With create=False the
    folder must exist. Only PATH itself is ever created by the caller, never its parents."""
    where = _where(path, flag)
    with _unusable(where):
        if path.exists():
            if not path.is_dir():
                raise SpecError(f"{where} is a file, not a folder",
                                "name a folder (new or existing)")
            if not os.access(path, os.W_OK | os.X_OK):
                raise SpecError(f"{where} is not writable", "choose a folder you can write to")
        elif not create:
            raise SpecError(f"{where} does not exist", "name an existing folder")
        else:
            _can_create(path, where, "folder")


def check_file(path: Path, flag: str) -> None:
    """PATH can be written as a file: a folder there, a missing parent or no permission is
    one line, exit 2, before anything is written."""
    where = _where(path, flag)
    with _unusable(where):
        if path.is_dir():
            raise SpecError(f"{where} is a folder, not a file",
                            f"name a file, e.g. {path / 'out'}")
        if path.exists():
            if not os.access(path, os.W_OK):
                raise SpecError(f"{where} is not writable", "choose another file")
        else:
            _can_create(path, where, "file")
