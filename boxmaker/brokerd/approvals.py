"""The table of calls waiting for the owner, in memory only.

I/O: none (threads and a lock). Each entry holds the `Ask`, what `approvals`
lists, its expiry, and a one-slot channel on which the waiting connection thread
receives its verdict: a `Decision` to run, or a `Denial`.

The one rule that settles every race: an entry is answered by whoever removes it
from the table while holding the table's lock: approve, refuse (on admin.sock or
in chat), the expiry thread, or the waiting thread when its requester has gone.
Everyone else finds it gone (`take` returns None) and does nothing. An approve
that names a digest (`bxctl approve N --digest D`) takes the entry only if its
digest starts with D, under the same lock; otherwise the entry stays where it is
(`take_bound` returns `Mismatch`) for the owner to look at again.

Whoever answers also says how (`send`), or, for a requester gone, that nobody
did (`abandon`); that `Settled` is what the chat post of the approval shows
(`gateway_link`), and it is set before the verdict is handed over. An entry's
chat post id (`post`) is set by the gateway link once gatewayd has posted it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.policy import Ask, Decision, Denial
from boxmaker.core.wire.broker_admin import PendingApproval

Verdict = Decision | Denial


@dataclass(frozen=True, slots=True)
class Settled:
    """How an entry was settled. `answer` None: abandoned (its requester went away)."""

    answer: ApprovalAnswer | None
    by: str | None  # "bxctl", the owner's chat user id, or None (expiry, abandoned)
    verdict: Verdict | None  # None when abandoned


ABANDONED = Settled(answer=None, by=None, verdict=None)


@dataclass(eq=False)
class Pending:
    """One waiting call. `approval` is the seq of its Decision record."""

    approval: int
    ask: Ask
    item: PendingApproval
    post: str | None = None  # its chat post, once gatewayd has posted it
    _verdicts: queue.Queue[Verdict] = field(default_factory=lambda: queue.Queue(maxsize=1))
    _settled: Settled | None = None
    _settled_event: threading.Event = field(default_factory=threading.Event)

    @property
    def expires(self) -> str:
        return self.item.expires

    def send(self, verdict: Verdict, answer: ApprovalAnswer, by: str | None) -> None:
        """Called once, by whoever took the entry out of the table and answered it."""
        self._settle(Settled(answer=answer, by=by, verdict=verdict))
        self._verdicts.put_nowait(verdict)

    def abandon(self) -> None:
        """Called once, by the waiting thread that took its own entry back."""
        self._settle(ABANDONED)

    def _settle(self, settled: Settled) -> None:
        self._settled = settled
        self._settled_event.set()

    @property
    def settled(self) -> Settled | None:
        """How it was settled; None while it still waits."""
        return self._settled if self._settled_event.is_set() else None

    def wait_settled(self, timeout: float) -> Settled | None:
        """How it was settled, waiting at most `timeout` seconds; None if still waiting."""
        self._settled_event.wait(timeout)
        return self.settled

    def wait(self, timeout: float) -> Verdict | None:
        """The verdict, or None if none came within `timeout` seconds."""
        try:
            return self._verdicts.get(timeout=timeout)
        except queue.Empty:
            return None


@dataclass(frozen=True, slots=True)
class Mismatch:
    """`take` with a digest that is not the entry's: the entry stays in the table."""

    digest: str  # the entry's whole digest


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

    def take_bound(self, approval: int, digest: str) -> Pending | Mismatch | None:
        """As `take`, but only if the entry's digest starts with `digest`; else `Mismatch`."""
        with self._lock:
            entry = self._entries.get(approval)
            if entry is not None and not entry.item.digest.startswith(digest):
                return Mismatch(entry.item.digest)
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
