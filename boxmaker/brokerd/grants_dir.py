"""Reads the grants directory at every decision, and reports an invalid set once.

I/O: lists and reads the directory (no cache, no reload signal: a change applies
to the next call); logs each distinct set of problems once, with the runbook
pointer, so a broken file does not flood the log at every call.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from boxmaker.core.grant_loading import load_grant_dir
from boxmaker.core.grants import GrantProblem, GrantSet

log = logging.getLogger(__name__)


class GrantsDir:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._reported: tuple[GrantProblem, ...] = ()

    def load(self) -> GrantSet:
        grants = load_grant_dir(
            lambda: os.listdir(self.directory),
            lambda name: (self.directory / name).read_bytes(),
            str(self.directory),
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
        log.error("event=grants_invalid calls are denied; see runbook.md#grants-invalid")
