"""Answers that fit in frames: a tool result cut to fit, an approval list in pages. No I/O.

A frame holds at most `frames.MAX_FRAME` (1,048,576) bytes of envelope, and an
answer that cannot be framed cannot be sent at all. brokerd makes sure its two
answers of unbounded size always fit, leaving `MARGIN` bytes spare (so that loopd,
which passes a result's content on inside its own, slightly larger envelopes,
can frame it too):

    fit_result     a `result` whose final envelope would be over the budget has
                   its content cut at a character boundary (never inside a UTF-8
                   sequence: strings are cut between code points) to the longest
                   prefix that fits, and is marked truncated. Within the budget it
                   is returned unchanged. brokerd does this before the Result record
                   is written, so the record's bytes and sha256 are of what is sent.
    paged          the items of a listing (`approval_list`, `session_list`,
                   `session_state_list`: `page_items` is the first), split into pages whose
                   envelopes each fit in the budget, in order; at least one page
                   (empty when nothing waits). Every page but the last goes out as
                   a `final: false` approval_list, the last as the final one, and a
                   client joins the items of all of them. One item alone always
                   fits: its arguments are at most `argument_size.MAX_ARGUMENT_BYTES`
                   before escaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import orjson

from boxmaker.core.fitting import largest, pages
from boxmaker.core.strict import Strict
from boxmaker.core.wire.broker import ResultResponse
from boxmaker.core.wire.broker_admin import ApprovalList, PendingApproval
from boxmaker.core.wire.envelope import Envelope, Message, encode_envelope
from boxmaker.core.wire.frames import MAX_FRAME

_I = TypeVar("_I", bound=Strict)

MARGIN = 65_536
FRAME_BUDGET = MAX_FRAME - MARGIN  # 983,040 bytes of envelope


def envelope_size(message: Message, request_id: str, *, final: bool = True) -> int:
    """The bytes of the envelope that carries `message` (the frame, less its prefix)."""
    return len(encode_envelope(Envelope(id=request_id, final=final, message=message)))


def string_size(text: str) -> int:
    """The bytes of `text` as a JSON string, without its quotes."""
    return len(orjson.dumps(text)) - 2


# what a result's envelope holds besides its content and id, with room to spare
# (`{"id":"","final":true,"message":{"kind":"tool_response","status":"result",
# "content":"","class":"private","untrusted":false,"truncated":false}}` is 142 bytes)
_RESULT_FIXED = 512
_MAX_ESCAPED = 6  # the most bytes orjson writes for one character (`\u001f`)


def _surely_fits(response: ResultResponse, request_id: str, budget: int) -> bool:
    """True when the envelope fits however its strings are escaped (no encoding needed)."""
    chars = len(response.content) + len(request_id)
    return _MAX_ESCAPED * chars + _RESULT_FIXED <= budget


def fit_result(
    response: ResultResponse, request_id: str, budget: int = FRAME_BUDGET
) -> ResultResponse:
    """`response`, its content cut to fit `budget` and marked truncated if it was over."""
    if _surely_fits(response, request_id, budget):
        return response
    if envelope_size(response, request_id) <= budget:
        return response
    content = response.content
    empty = response.model_copy(update={"content": "", "truncated": True})
    room = budget - envelope_size(empty, request_id)  # what the escaped content may take
    # the longest strict prefix whose escaped form fits (escaping never shrinks a
    # prefix); strict, since the whole content did not fit
    low = largest(min(len(content) - 1, room), lambda n: string_size(content[:n]) <= room)
    return response.model_copy(update={"content": content[:low], "truncated": True})


def paged(
    empty: Message, items: Sequence[_I], request_id: str, budget: int
) -> list[tuple[_I, ...]]:
    """`items` in pages, each of whose envelopes (`empty` with the page as its items,
    not final) fits in `budget`; at least one page, and an item too big alone still
    gets a page of its own (the caller cuts such items first)."""
    base = envelope_size(empty, request_id, final=False)
    return pages(items, item_size, budget - base)  # a comma between items


def item_size(item: Strict) -> int:
    """The bytes of `item` in an envelope's JSON."""
    return len(orjson.dumps(item.model_dump(mode="json", by_alias=True, exclude_none=True)))


def page_items(
    items: Sequence[PendingApproval], request_id: str, budget: int = FRAME_BUDGET
) -> list[tuple[PendingApproval, ...]]:
    """`items` in pages, each of whose approval_list envelopes fits in `budget`."""
    return paged(ApprovalList(items=()), items, request_id, budget)
