"""The table of calls waiting for the owner, in memory only.

I/O: none (threads and a lock). Each entry holds the `Ask`, what `approvals`
lists, its expiry, and a one-slot channel on which the waiting connection thread
receives its verdict: a `Decision` to run, or a `Denial`.

The one rule that settles every race: an entry is answered by whoever removes it
from the table while holding the table's lock: approve, refuse, the expiry
thread, or the waiting thread when its requester has gone. Everyone else finds
it gone (`take` returns None) and does nothing.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from boxmaker.core.messages import PendingApproval
from boxmaker.core.policy import Ask, Decision, Denial

Verdict = Decision | Denial


@dataclass(eq=False)
class Pending:
    """One waiting call. `approval` is the seq of its Decision record."""

    approval: int
    ask: Ask
    item: PendingApproval
    _verdicts: queue.Queue[Verdict] = field(default_factory=lambda: queue.Queue(maxsize=1))

    @property
    def expires(self) -> str:
        return self.item.expires

    def send(self, verdict: Verdict) -> None:
        """Called once, by whoever took the entry out of the table."""
        self._verdicts.put_nowait(verdict)

    def wait(self, timeout: float) -> Verdict | None:
        """The verdict, or None if none came within `timeout` seconds."""
        try:
            return self._verdicts.get(timeout=timeout)
        except queue.Empty:
            return None


class PendingTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, Pending] = {}

    def add(self, entry: Pending) -> None:
        with self._lock:
            self._entries[entry.approval] = entry

    def take(self, approval: int) -> Pending | None:
        """Remove and return the entry: the caller now answers it. None if gone."""
        with self._lock:
            return self._entries.pop(approval, None)

    def take_expired(self, now: str) -> list[Pending]:
        """Remove and return every entry whose expiry is at or before `now`."""
        with self._lock:
            due = [e for e in self._entries.values() if now >= e.expires]
            for entry in due:
                del self._entries[entry.approval]
            return due

    def items(self) -> tuple[PendingApproval, ...]:
        with self._lock:
            return tuple(e.item for e in sorted(self._entries.values(), key=lambda e: e.approval))
