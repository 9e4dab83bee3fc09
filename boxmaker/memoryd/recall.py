"""Recall: full-text search over the memory files, through an SQLite FTS5 index.

I/O: reads `memory.md`, `user.md` and `notes.md` (through `boxmaker.memoryd.files`)
on `rebuild`; otherwise only an in-memory SQLite database. Nothing is written to disk.
A damaged file makes `rebuild` raise `MemoryFileDamagedError` and keeps the old index.

Rules, in the order the code below applies them:

1. The files are the truth; the index is disposable. It lives in an in-memory
   database, never in a file: `rebuild` reads the three files and builds a fresh
   index (at start and on the owner's `reindex`), so a hand edit of a file, a
   crash between a write and its index update, or a change of tokenizer is
   mended by a rebuild and no stale index file can outlive its files. A new index
   is built beside the old one and swapped in, so a recall during a rebuild reads
   the old index, never a half-built one.
2. A write updates the index incrementally: `update(entry)` replaces the entry
   with that kind and id (or adds it), `remove(id, kind)` drops it; neither reads
   a file. An entry is known by its kind and id, since an id is unique only in its
   file (`boxmaker.memoryd.files`, rule 1).
3. The query is the model's text, never FTS5 syntax. It is cut into words (runs
   of Unicode letters, digits and `_`); everything else, FTS5's operators and
   quotes, `*`, `^`, `-`, `:`, parentheses, NUL and control characters, is a
   separator and so dropped. Each word becomes a quoted phrase (`"word"`), so an
   operator word such as `NEAR`, `AND` or `text` is an ordinary word. Words are
   case-folded and deduplicated, each cut to `MAX_TERM_CHARS` characters, and at
   most `MAX_TERMS` are kept (the first ones), joined with `OR`. A query with no
   word returns nothing. So no query can raise a syntax error, and none does more
   than `MAX_TERMS` term look-ups.
4. Ranking is BM25 (FTS5's `rank`), best first; `limit` is clamped to
   `0..MAX_LIMIT`.
5. A result is untrusted when any entry it returns is untrusted (an untrusted
   note), or is one the memory block would leave out (it fails a refuse rule
   again: an entry edited by hand with a bidi control, a key): the reading session
   becomes memory-tainted, which brokerd applies. Entries are returned as the
   files hold them, with their `untrusted` mark.

Concurrency: memoryd serves one thread per connection, so one lock guards the
database and the entry table; every method takes it, briefly. `rebuild` reads the
files without it; an `update` or `remove` made while it reads goes to the old
index and is also kept, then replayed on the new one before the swap, so a write
acknowledged during a rebuild is never missing from the index. Rebuilds run one
at a time.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from boxmaker.core.grants.tools import MAX_RECALL
from boxmaker.core.sanitize import refuse
from boxmaker.memoryd.files import FILES, Entry, read_entries

MAX_TERMS = 32
MAX_TERM_CHARS = 64
MAX_LIMIT = MAX_RECALL  # the same bound the argument parser puts on `limit`

# unicode61 folds case and diacritics; porter stems English words so that
# "deploys" finds "deployed". Both run on the query's quoted words too.
_SCHEMA = (
    "CREATE VIRTUAL TABLE entries USING fts5("
    "text, tokenize = 'porter unicode61 remove_diacritics 2')"
)
_SEARCH = "SELECT rowid FROM entries WHERE entries MATCH ? ORDER BY rank LIMIT ?"
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class RecallResult:
    """Entries best first; `untrusted` when any of them is an untrusted note."""

    entries: list[Entry]
    untrusted: bool


def match_expression(query: str) -> str | None:
    """The FTS5 MATCH expression for the model's `query` (rule 3); None when it has no word."""
    terms: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(query):
        word = match.group().casefold()[:MAX_TERM_CHARS]
        if word in seen:
            continue
        seen.add(word)
        terms.append(f'"{word}"')  # \w never matches a double quote
        if len(terms) == MAX_TERMS:
            break
    return " OR ".join(terms) if terms else None


class _Index:
    """One FTS5 database and the entries behind its rowids."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self.db.execute(_SCHEMA)
        self.by_rowid: dict[int, Entry] = {}
        self.rowid_of: dict[tuple[str, str], int] = {}
        self.next_rowid = 1

    def put(self, entry: Entry) -> None:
        self.drop(entry.id, entry.kind)
        rowid = self.next_rowid
        self.next_rowid += 1
        self.db.execute("INSERT INTO entries (rowid, text) VALUES (?, ?)", (rowid, entry.text))
        self.by_rowid[rowid] = entry
        self.rowid_of[entry.kind, entry.id] = rowid

    def drop(self, entry_id: str, kind: str) -> bool:
        rowid = self.rowid_of.pop((kind, entry_id), None)
        if rowid is None:
            return False
        self.db.execute("DELETE FROM entries WHERE rowid = ?", (rowid,))
        del self.by_rowid[rowid]
        return True

    def search(self, expression: str, limit: int) -> list[Entry]:
        rows = self.db.execute(_SEARCH, (expression, limit)).fetchall()
        return [self.by_rowid[rowid] for (rowid,) in rows]


class RecallIndex:
    """Recall over the memory files in `directory` (rules in the module docstring).

    Empty until the first `rebuild`. `read` reads one file's entries (a test passes
    its own).
    """

    def __init__(
        self, directory: Path, read: Callable[[Path, str], list[Entry]] = read_entries
    ) -> None:
        self._directory = directory
        self._read = read
        self._lock = threading.Lock()
        self._index = _Index()
        self._rebuilding = threading.Lock()
        self._pending: list[Callable[[_Index], object]] | None = None

    def rebuild(self) -> int:
        """Read the three files and replace the index (rule 1); the number of entries."""
        with self._rebuilding:
            with self._lock:
                self._pending = []
            try:
                fresh = self._build()
            except BaseException:
                with self._lock:
                    self._pending = None
                raise
            with self._lock:
                for change in self._pending:
                    change(fresh)
                self._pending = None
                old, self._index = self._index, fresh
            old.db.close()
            return len(fresh.by_rowid)

    def _build(self) -> _Index:
        entries = [
            entry
            for kind, name in FILES.items()
            for entry in self._read(self._directory / name, kind)
        ]
        fresh = _Index()
        fresh.db.execute("BEGIN")
        for entry in entries:
            fresh.put(entry)
        fresh.db.execute("COMMIT")
        return fresh

    def update(self, entry: Entry) -> None:
        """Add `entry`, or replace the entry of its kind and id, after a write (rule 2)."""
        with self._lock:
            self._index.put(entry)
            if self._pending is not None:
                self._pending.append(lambda index: index.put(entry))

    def remove(self, entry_id: str, kind: str) -> bool:
        """Drop the `kind` entry with `entry_id` (rule 2); False when there was none."""
        with self._lock:
            if self._pending is not None:
                self._pending.append(lambda index: index.drop(entry_id, kind))
            return self._index.drop(entry_id, kind)

    def __len__(self) -> int:
        with self._lock:
            return len(self._index.by_rowid)

    def recall(self, query: str, limit: int = 5) -> RecallResult:
        """The entries that best match the model's `query`, best first (rules 3 to 5)."""
        expression = match_expression(query)
        limit = max(0, min(limit, MAX_LIMIT))
        if expression is None or limit == 0:
            return RecallResult(entries=[], untrusted=False)
        with self._lock:
            entries = self._index.search(expression, limit)
        return RecallResult(entries=entries, untrusted=any(_untrusted(e) for e in entries))


def _untrusted(entry: Entry) -> bool:
    """Marked untrusted, or failing a refuse rule as the memory block judges it (rule 5)."""
    return entry.untrusted or bool(refuse(entry.text, memory=True))
