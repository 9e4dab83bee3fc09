"""What `ChainVerifier.finish` reports about an audit log. Pure values; no I/O.

The report carries everything the writer needs to append a Recovery or an
AcceptedBreak record (their seq and prev among it), so no consumer works out a
seq or a prev a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Location:
    """A line of the log: its file's name and its 1-based line number in that file."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class ChainFailure:
    """The first failure since the last accepted break, and what a break must carry.

    `last_good` is the hash of the last line that verified before the failure (all
    zeros if none did). `break_prev` and `break_seq` are the prev and seq of an
    AcceptedBreak appended after the last line fed; `tail_torn` says that line has
    no newline, which must be written before the break record.
    """

    file: str
    line: int
    what: str
    last_good: str
    break_prev: str
    break_seq: int
    tail_torn: bool

    @property
    def at(self) -> Location:
        return Location(self.file, self.line)

    def render(self) -> str:
        """The owner's line: `<file>:<line>: <what>`."""
        return f"{self.file}:{self.line}: {self.what}"


@dataclass(frozen=True, slots=True)
class TornTail:
    """The last line of the last file needs recovery, and what its Recovery must carry."""

    at: Location
    has_newline: bool
    bytes: int
    sha256: str
    recovery_prev: str
    recovery_seq: int


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The verdict on the lines fed to one `ChainVerifier`.

    `records` counts the records that verified; `head` is the hash of the last of
    them (for a resumed verifier that saw none, the point it resumed from; None for
    a new verifier that saw none); `next_seq` is the seq the next record must have.
    `abandoned` and `unfinished` hold decision seqs; neither is a failure.
    `heads` pairs each seq given to `ChainVerifier.watch` with the hash of the
    record that verified with it (audit checkpoints; a seq with none is left out).
    """

    records: int
    head: str | None
    next_seq: int
    failure: ChainFailure | None
    recoveries: tuple[Location, ...]
    accepted_breaks: tuple[Location, ...]
    abandoned: tuple[int, ...]
    unfinished: tuple[int, ...]
    clock_warnings: tuple[Location, ...]
    torn_tail: TornTail | None
    heads: tuple[tuple[int, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def last_seq(self) -> int | None:
        """The seq of the last record (or of the point resumed from); None if there is none."""
        return None if self.head is None else self.next_seq - 1

    def head_of(self) -> MappingProxyType[int, str]:
        """`heads` as a mapping from seq to hash."""
        return MappingProxyType(dict(self.heads))
