"""What every bxctl command shares: the parser class, the error type, and output.

`CliError` carries a one-line message and an exit status; `main` is the one place
that turns it (and usage errors) into a line on stderr and that status.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

from boxmaker.core.errors import BoxmakerError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

# The one table of exit statuses; `main` is the one place that returns them.
EXIT_OK = 0
EXIT_PROBLEM = 1  # the command ran and found a problem (bad grants, broken chain)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it
# A write failed because its reader went away (`bxctl ... | head -c1`): nothing is
# printed, and the status is 128 + SIGPIPE, what a shell reports for a command a
# closed pipe ended, so `set -o pipefail` scripts that allow 141 allow this too.
# It is not 1: that would read as "found a problem" (a broken audit chain).
EXIT_CLOSED_PIPE = 141


class CliError(BoxmakerError):
    """A failure the owner can act on: printed as one line, then exit `status`."""

    def __init__(self, message: str, status: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)", EXIT_USAGE)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """As argparse's, without hiding a failed write: `main` ends a closed pipe."""
        if message:
            (file or sys.stderr).write(message)


def out(line: str = "") -> None:
    """Write one line to stdout; text that is not valid UTF-8 is shown escaped."""
    sys.stdout.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")


def err(line: str) -> None:
    """Write one line to stderr."""
    sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
