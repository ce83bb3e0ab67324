"""One exception family. Every error carries a one-line problem and a hint (the fix).

Errors are converted to exit codes only at the top (cli.main); tracebacks only with --debug.
"""

from __future__ import annotations


class TunbenchError(Exception):
    """Base of every error tunbench reports to a user."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class SpecError(TunbenchError):
    """Invalid user input: flags, experiment file, parameters. Nothing was changed."""

    exit_code = 2


class UnavailableError(TunbenchError):
    """A tunnel kind, workload or feature cannot run on this host (kernel, tool, privilege)."""

    exit_code = 3


class CommandFailed(TunbenchError):
    """A process exited non-zero or timed out."""

    exit_code = 4

    def __init__(self, message: str, hint: str = "", *, argv: list[str] | None = None,
                 returncode: int | None = None, output: str = "") -> None:
        super().__init__(message, hint)
        self.argv = argv or []
        self.returncode = returncode
        self.output = output


class Interrupted(TunbenchError):
    """SIGINT or SIGTERM arrived; everything created is undone before exiting."""

    exit_code = 130

    def __init__(self, signame: str = "SIGINT") -> None:
        super().__init__(f"interrupted by {signame}", "everything created by this run was removed")
        self.signame = signame
