"""The memory journal: one JSON line per write, with its provenance. I/O: one append-only file.

`<home>/memory/journal.jsonl`; read by `bxctl memory log` (through `read_journal`).

Rules:

1. One line per write that memoryd acknowledges or was about to acknowledge;
   a refused write has none. A line is the compact JSON of a `JournalRecord`
   with its keys in field order, every field present (`null` when empty).
2. A line is appended with one `write` on an `O_APPEND` descriptor and fsynced
   before the write's file is replaced: the journal is the write's intent, so
   every entry in a memory file has its line (docs/memoryd.md, "Ordering").
3. A crash between the append and the file's replacement leaves a line whose
   entry is not in the file: a write that was never acknowledged.
4. A last line without its line feed was cut short by a crash while it was
   being written, so it was never acknowledged: the reader skips it, and the
   next append first cuts it off.
5. Any other line that does not parse is damage: `JournalDamagedError` names
   the file and the line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from boxmaker.core.errors import DamagedError
from boxmaker.core.labels import DataClass
from boxmaker.ipc.files import append_durable
from boxmaker.memoryd.rules import WriteAction

JOURNAL = "journal.jsonl"


class JournalDamagedError(DamagedError, ValueError):
    """A journal line does not parse; the text names the file and the line."""


@dataclass(frozen=True)
class JournalRecord:
    """One write, as the journal records it."""

    time: str
    session: str
    call: str
    taint: DataClass
    untrusted: bool  # the session had read untrusted content
    action: WriteAction
    kind: str  # the kind the write asked for
    entry: str  # the id written (the note's id when it was lowered to a note)
    removed: tuple[str, ...]  # ids a consolidation removed
    rule: str | None  # the flag rule the text matched
    entry_untrusted: bool  # the entry written is marked untrusted


def encode_record(record: JournalRecord) -> bytes:
    """The record's line, line feed included."""
    fields = asdict(record)
    fields["removed"] = list(record.removed)
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def decode_record(line: bytes) -> JournalRecord:
    """The record of one line (without its line feed); ValueError if it does not parse."""
    fields: Any = json.loads(line)
    if not isinstance(fields, dict) or set(fields) != set(JournalRecord.__dataclass_fields__):
        raise ValueError("not a journal record")
    removed = fields["removed"]
    if not isinstance(removed, list) or not all(isinstance(i, str) for i in removed):
        raise ValueError("removed is not a list of ids")
    for name in ("time", "session", "call", "kind", "entry"):
        if not isinstance(fields[name], str):
            raise ValueError(f"{name} is not a string")
    if not isinstance(fields["rule"], str | None):
        raise ValueError("rule is not a string or null")
    if not isinstance(fields["untrusted"], bool) or not isinstance(fields["entry_untrusted"], bool):
        raise ValueError("untrusted is not a boolean")
    return JournalRecord(
        time=fields["time"],
        session=fields["session"],
        call=fields["call"],
        taint=DataClass(fields["taint"]),
        untrusted=fields["untrusted"],
        action=WriteAction(fields["action"]),
        kind=fields["kind"],
        entry=fields["entry"],
        removed=tuple(removed),
        rule=fields["rule"],
        entry_untrusted=fields["entry_untrusted"],
    )


def append_record(path: Path, record: JournalRecord) -> None:
    """Append `record` and fsync (rules 2 and 4). Callers serialise appenders."""
    _cut_torn_line(path)
    append_durable(path, encode_record(record))  # its fsync covers the cut too


def _cut_torn_line(path: Path) -> None:
    """Cut off a last line without its line feed (rule 4); nothing if there is no file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = os.pread(fd, size, 0)
            os.ftruncate(fd, data.rfind(b"\n") + 1)
    finally:
        os.close(fd)


def read_journal(path: Path) -> list[JournalRecord]:
    """Every record of the journal at `path`, oldest first (empty if it is missing)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    records: list[JournalRecord] = []
    for number, line in enumerate(lines[:-1], start=1):  # the last piece is cut short or b""
        try:
            records.append(decode_record(line))
        except ValueError as exc:
            raise JournalDamagedError(f"{path}:{number}: not a journal record ({exc})") from exc
    return records
