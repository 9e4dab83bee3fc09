"""A runtime that records every spec it is given and answers as it is told.

It implements `boxmaker.sandbox.runner.Runtime`: tests read `specs` to see what
would have run (mounts, egress, arguments) and set `answer` to choose the outcome.
"""

from __future__ import annotations

import threading

from boxmaker.sandbox.runner import RunError, RunOutput, RunSpec


class RecordingRuntime:
    def __init__(self, answer: RunOutput | RunError | None = None) -> None:
        self.answer: RunOutput | RunError = answer or RunOutput(content="ok", truncated=False)
        self.specs: list[RunSpec] = []
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.specs)

    def run(self, spec: RunSpec) -> RunOutput | RunError:
        with self._lock:
            self.specs.append(spec)
        return self.answer
