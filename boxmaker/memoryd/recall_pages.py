"""A recall's answer in pages, each well inside one frame. Pure; no I/O.

A recall returns up to 50 entries, and an entry edited by hand may be of any size,
so one answer could pass the 1 MiB frame and not be sent at all. The rules:

1. The entries, best first, are cut into pages in order: each page holds the most
   entries whose content, escaped as the frame carries it (the entries' JSON is
   itself a JSON string in the `tool_response`), stays within PAGE_BYTES. A JSON
   string escapes each character alone, so an entry's cost is exact and its own.
2. PAGE_BYTES is four times `MAX_ARGUMENT_BYTES`: an entry any write made fits a
   page alone however its characters escape, and a page is far below the frame
   (and nearer what loopd shows the model of one result).
3. An entry too large for a page alone (only a hand edit makes one) has a page of
   its own, its text cut at a character to fit, and `"cut": true`; the result is
   then marked truncated.
4. One page: the content is `{"entries": [...]}`, as it always was. More: it is
   `{"entries": [...], "page": k, "pages": n, "more": <one sentence>}`, the
   sentence saying how many entries the other pages hold and to call memory_recall
   again with the same query and limit and `page` set to the next one. A page past
   the last answers no entries, and says how many pages there are.
5. The same query on the same files gives the same pages (ranking and cuts are
   deterministic), so asking for page 2 continues page 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from boxmaker.core.fitting import largest, pages
from boxmaker.core.grants.argument_size import MAX_ARGUMENT_BYTES
from boxmaker.memoryd.files import Entry

PAGE_BYTES = 4 * MAX_ARGUMENT_BYTES  # escaped content of one page, at most (rule 2)
_FIXED = 1024  # the page's keys, numbers and `more` sentence, escaped, with room to spare


@dataclass(frozen=True)
class RecallPage:
    """One page of a recall's answer: its content, and whether an entry was cut."""

    content: str
    truncated: bool


def entry_json(entry: Entry) -> dict[str, object]:
    """An entry as a recall shows it."""
    return {
        "id": entry.id,
        "kind": entry.kind,
        "text": entry.text,
        "untrusted": entry.untrusted,
        "time": entry.time,
    }


def _escaped(value: object) -> int:
    """The bytes of `value`'s JSON once it is escaped again inside a JSON string."""
    return len(orjson.dumps(orjson.dumps(value).decode())) - 2


def _fitted(entry: Entry, room: int) -> dict[str, object]:
    """`entry`'s JSON, its text cut to the longest prefix that fits `room` (rule 3)."""
    shown = entry_json(entry)
    if _escaped(shown) <= room:
        return shown
    text = entry.text
    low = largest(
        len(text) - 1, lambda n: _escaped({**shown, "text": text[:n], "cut": True}) <= room
    )
    return {**shown, "text": text[:low], "cut": True}


Shown = dict[str, object]  # an entry as a recall shows it


def split_pages(entries: Sequence[Entry], budget: int = PAGE_BYTES) -> list[list[Shown]]:
    """`entries` as pages of shown entries, each page's escaped entries within `budget`
    less the fixed part (rules 1 and 3); at least one page."""
    room = budget - _FIXED
    shown = (_fitted(entry, room) for entry in entries)
    # each entry with the comma before the next
    return [list(page) for page in pages(shown, lambda s: _escaped(s) + 1, room, between=0)]


def recall_page(entries: Sequence[Entry], page: int, budget: int = PAGE_BYTES) -> RecallPage:
    """Page `page` (1-based) of the answer to a recall that found `entries` (rule 4)."""
    pages = split_pages(entries, budget)
    if len(pages) == 1 and page == 1:
        return RecallPage(orjson.dumps({"entries": pages[0]}).decode(), _any_cut(pages[0]))
    shown = pages[page - 1] if page <= len(pages) else []
    return RecallPage(
        orjson.dumps(
            {"entries": shown, "page": page, "pages": len(pages), "more": _more(pages, page)}
        ).decode(),
        _any_cut(shown),
    )


def _any_cut(page: Sequence[dict[str, object]]) -> bool:
    return any(shown.get("cut") for shown in page)


def _more(pages: Sequence[Sequence[object]], page: int) -> str:
    if page > len(pages):
        return f"There is no page {page}: this recall has {len(pages)} pages."
    others = sum(len(p) for p in pages) - len(pages[page - 1])
    if page == len(pages):
        return f"This is the last page; the other pages hold {others} entries."
    return (
        f"This recall's other pages hold {others} entries: call memory_recall again with "
        f"the same query and limit and page {page + 1} for the next."
    )
