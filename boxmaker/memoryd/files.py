"""The memory files' format: Markdown the owner can read and edit by hand. No I/O but reads.

Files under `<home>/memory/` (`FILES`): `memory.md` and `user.md` hold identity
entries, `notes.md` notes; `soul.md` is the owner's raw text (`read_soul`).

The rules of the format (docs/memoryd.md has the reasons):

1. A file is a sequence of entries, each a block:

       <!-- entry <id> <time> -->              or   <!-- entry <id> <time> untrusted -->
       <the entry's text, any number of lines>
       <one blank line>

   `<id>` is an identifier (boxmaker.core.ids), unique in its file; `<time>` a
   timestamp (`YYYY-MM-DDTHH:MM:SS.mmmZ`). The header is an HTML comment, so a
   Markdown viewer shows only the texts.
2. Lines are split on line feed only: a carriage return or U+2028 is text.
3. A header is recognised only at a line start, and only exactly as above. A line
   that starts with `<!-- entry` but is not a header is damage.
4. A text line that starts with zero or more backslashes then `<!-- entry` is
   written with one more backslash in front (and read with one less), so any
   text round-trips; in Markdown `\\<` shows as `<`, so the owner reads the text.
5. An entry's text is what lies between its header line and the next header (or
   the end of the file), less the block's end: `\\n\\n` if it ends so, else `\\n` if
   it ends so. `render_entries` always writes `\\n\\n`, so any text round-trips
   exactly; a hand edit that drops the blank line still reads.
6. Blank lines before the first header are allowed; any other text there is
   damage. A file that is missing is empty. Bytes that are not UTF-8 are damage.
7. Damage raises `MemoryFileDamagedError` naming the file and the 1-based line;
   nothing here repairs a file (the owner does, by hand).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.errors import DamagedError
from boxmaker.core.ids import is_identifier
from boxmaker.core.timestamps import check_timestamp

FILES = {"memory": "memory.md", "user": "user.md", "note": "notes.md"}
"""The file of each kind of entry, under the memory directory."""

IDENTITY_KINDS = ("memory", "user")
"""The kinds whose entries form the memory block (identity entries)."""

SOUL = "soul.md"
"""The owner's own file: read raw, never written or checked by memoryd."""

_HEADER_START = "<!-- entry"
_HEADER = re.compile(r"<!-- entry (?P<id>\S+) (?P<time>\S+)(?P<untrusted> untrusted)? -->")
_ESCAPED = re.compile(r"\\*<!-- entry")


class MemoryFileDamagedError(DamagedError, ValueError):
    """A memory file does not parse; the text names the file and the line."""

    def __init__(self, path: Path, line: int, what: str) -> None:
        super().__init__(f"{path}:{line}: {what}")
        self.path = path
        self.line = line
        self.what = what


@dataclass(frozen=True)
class Entry:
    """One entry of a memory file."""

    id: str
    kind: str  # "memory" | "user" | "note"
    text: str
    untrusted: bool
    time: str  # RFC 3339 UTC ms, core.timestamps.format_timestamp


def header_line(entry: Entry) -> str:
    """The header line of `entry`, without its line feed."""
    mark = " untrusted" if entry.untrusted else ""
    return f"{_HEADER_START} {entry.id} {entry.time}{mark} -->"


def escape_text(text: str) -> str:
    """`text` with one backslash before every line that could read as a header (rule 4)."""
    lines = text.split("\n")
    return "\n".join("\\" + line if _ESCAPED.match(line) else line for line in lines)


def unescape_line(line: str) -> str:
    """The inverse of `escape_text` on one line."""
    return line[1:] if line.startswith("\\") and _ESCAPED.match(line) else line


def render_entries(entries: Sequence[Entry]) -> bytes:
    """The file holding `entries`, in order (rule 1); read back by `read_entries`."""
    blocks = [f"{header_line(entry)}\n{escape_text(entry.text)}\n\n" for entry in entries]
    return "".join(blocks).encode("utf-8")


def parse_entries(data: bytes, kind: str, path: Path) -> list[Entry]:
    """The entries of a file's bytes; `path` only names the file in errors."""
    if kind not in FILES:
        raise ValueError(f"unknown kind of entry: {kind!r}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = data[: exc.start].count(b"\n") + 1
        raise MemoryFileDamagedError(path, at, "not UTF-8 text") from exc
    entries: list[Entry] = []
    seen: set[str] = set()
    header: tuple[str, str, bool] | None = None
    body: list[str] = []

    def close(before_header: bool) -> None:
        if header is None:
            return
        # the raw text up to the next header's line includes the last line's feed
        joined = "\n".join(body) + ("\n" if before_header else "")
        if joined.endswith("\n\n"):
            joined = joined[:-2]
        elif joined.endswith("\n"):
            joined = joined[:-1]
        entries.append(Entry(header[0], kind, joined, header[2], header[1]))

    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if line.startswith(_HEADER_START):
            close(before_header=True)
            header = _parse_header(line, path, number, seen)
            body = []
        elif header is None:
            if line.strip():
                raise MemoryFileDamagedError(path, number, "text before the first entry header")
        else:
            body.append(unescape_line(line))
    close(before_header=False)
    return entries


def _parse_header(line: str, path: Path, number: int, seen: set[str]) -> tuple[str, str, bool]:
    match = _HEADER.fullmatch(line)
    if match is None:
        raise MemoryFileDamagedError(
            path, number, "a line starts with '<!-- entry' but is not an entry header"
        )
    entry_id, time = match["id"], match["time"]
    if not is_identifier(entry_id):
        raise MemoryFileDamagedError(path, number, f"bad entry id {entry_id!r}")
    try:
        check_timestamp(time)
    except ValueError as exc:
        raise MemoryFileDamagedError(path, number, f"bad entry time {time!r}") from exc
    if entry_id in seen:
        raise MemoryFileDamagedError(path, number, f"entry id {entry_id} appears twice")
    seen.add(entry_id)
    return entry_id, time, match["untrusted"] is not None


def read_entries(path: Path, kind: str) -> list[Entry]:
    """The entries of the file at `path` (empty if it is missing); damage raises
    `MemoryFileDamagedError`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_entries(data, kind, path)


def read_soul(directory: Path) -> str:
    """The owner's `soul.md` under `directory`, raw ("" if it is missing)."""
    path = directory / SOUL
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise MemoryFileDamagedError(path, line, "not UTF-8 text") from exc
