"""Reads the grants directory at every decision, and reports an invalid set once.

I/O: lists and reads the directory (no cache, no reload signal: a change applies
to the next call); logs each distinct set of problems once, with the runbook
pointer, so a broken file does not flood the log at every call. The places no
grant may reach (`boxmaker.core.reserved`) are resolved once, when brokerd
starts, with the real paths of its home, grants, sockets and install prefix.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import boxmaker
from boxmaker.core.grant_loading import load_grant_dir
from boxmaker.core.grants import GrantProblem, GrantSet
from boxmaker.core.layout import Home
from boxmaker.core.reserved import install_places, reserved_places
from boxmaker.core.runbook import Runbook

log = logging.getLogger(__name__)


def own_places(home: Path, sockets: Iterable[Path]) -> list[tuple[str, str]]:
    """brokerd's home, its audit log and its socket directories, for `GrantsDir`."""
    places = [("home", str(home)), ("audit log", str(Home(home).audit))]
    return places + [("sockets", str(socket.parent)) for socket in sockets]


class GrantsDir:
    def __init__(self, directory: Path, places: Iterable[tuple[str, str]] = ()) -> None:
        self.directory = directory
        self.reserved = reserved_places(
            [
                ("grants", str(directory)),
                *places,
                *install_places(sys.prefix, boxmaker.__file__),
            ],
            os.path.realpath,
        )
        self._lock = threading.Lock()
        self._reported: tuple[GrantProblem, ...] = ()

    def load(self) -> GrantSet:
        grants = load_grant_dir(
            lambda: os.listdir(self.directory),
            lambda name: (self.directory / name).read_bytes(),
            str(self.directory),
            self.reserved,
        )
        self._report(grants.problems)
        return grants

    def _report(self, problems: tuple[GrantProblem, ...]) -> None:
        with self._lock:
            if problems == self._reported:
                return
            self._reported = problems
        if not problems:
            log.info("event=grants_valid directory=%s", self.directory)
            return
        for problem in problems:
            log.error("event=grant_problem %s", problem.render())
        log.error("event=grants_invalid calls are denied; %s", Runbook.GRANTS_INVALID.pointer)
