"""Reads the audit log's records for the commands that count them.

I/O: reads `<audit dir>/YYYY-MM-DD.jsonl` in name order, 8 MiB at a time, so a
log of any size is read in bounded memory; writes nothing. Lines are decoded
through the fast views of `boxmaker.core.audit.views` (a whole block at once),
and a line they do not take goes through the pydantic models. It does not check
the chain (`bxctl audit verify` does): a line that is not a record (a torn
final line, damage) is skipped and counted in `skipped`.

With `since` (`YYYY-MM-DD`), files named before that day are not read: a record
is written to the file of its own day or of a later one (after a clock step
back), never to an earlier one, so they hold no record of that day or later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from boxmaker.bxctl.cli import CliError
from boxmaker.core.audit.names import is_audit_file_name
from boxmaker.core.audit.records import RecordError, decode_record
from boxmaker.core.audit.views import RecordView, decode_view, decode_views, view_of_model

_BLOCK = 8 << 20


class AuditReader:
    """The records of one audit directory, in log order (module docstring)."""

    def __init__(self, audit_dir: Path, since: str = "") -> None:
        self.audit_dir = audit_dir
        self.since = since
        self.skipped = 0  # lines that are not records

    def names(self) -> list[str]:
        try:
            found = os.listdir(self.audit_dir)
        except OSError as exc:
            raise CliError(
                f"cannot read the audit log in {self.audit_dir}: {exc.strerror or exc}"
            ) from exc
        first = f"{self.since}.jsonl" if self.since else ""
        return sorted(n for n in found if is_audit_file_name(n) and n >= first)

    def records(self) -> Iterator[RecordView]:
        for name in self.names():
            path = self.audit_dir / name
            try:
                yield from self._file(path)
            except OSError as exc:
                raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def _file(self, path: Path) -> Iterator[RecordView]:
        rest = b""
        with path.open("rb", buffering=0) as file:
            while block := file.read(_BLOCK):
                lines = (rest + block).split(b"\n")
                rest = lines.pop()  # the start of a line the next block ends
                yield from self._lines(lines)
        if rest:
            self.skipped += 1  # a torn final line was never acted on

    def _lines(self, lines: list[bytes]) -> Iterator[RecordView]:
        views = decode_views(lines)
        if views is not None:
            yield from views
            return
        for line in lines:
            view = decode_view(line) or self._by_model(line)
            if view is None:
                self.skipped += 1
            else:
                yield view

    @staticmethod
    def _by_model(line: bytes) -> RecordView | None:
        try:
            record = decode_record(line)
        except RecordError:
            return None
        return view_of_model(record.model_dump(mode="json", by_alias=True))
