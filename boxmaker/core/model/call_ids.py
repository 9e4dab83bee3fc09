"""The ids of a reply's tool calls: the model's own where it wrote one, else one loopd makes.

Pure; no I/O (the randomness for a new id is handed in). A template that renders a
call's result next to the call pairs them by id (Mistral: `"call_id"` in
`[TOOL_RESULTS]`, or `[TOOL_RESULTS]id[TOOL_CONTENT]`), so a result must carry the id
of the call it answers, as the model wrote it. The rules:

1. **The form.** An id handed to a template is 9 ASCII letters and digits
   (`CALL_ID`): what Mistral's templates require (they raise on any other length)
   and its models write. An id is scaffolding in the prompt (the template writes it
   outside any message's text), so nothing else is ever handed on.
2. **The model's own.** Where the syntax carries ids (mistral: `[CALL_ID]id` before
   `[ARGS]`, or an `"id"` field of a call object), the reader gives each call the id
   it was written with (`ToolCall.id`), and it is kept when it has the form.
3. **A new one.** Where the model wrote none, or one not of the form, or one an
   earlier call of the same reply already has, loopd makes one of the form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from boxmaker.core.model.tool_calls import BadToolCall, ToolCall

Call = ToolCall | BadToolCall

ALPHANUMERIC = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
CALL_ID = re.compile(r"[A-Za-z0-9]{9}")


def has_form(call_id: str | None) -> bool:
    """Whether `call_id` is of the form a template is handed (rule 1)."""
    return call_id is not None and CALL_ID.fullmatch(call_id) is not None


def written_ids(calls: Sequence[Call]) -> tuple[str | None, ...]:
    """The id the model wrote for each call (rule 2): its `id` where it has the form."""
    return tuple(c.id if isinstance(c, ToolCall) and has_form(c.id) else None for c in calls)


def call_ids(written: Sequence[str | None], fresh: Callable[[], str]) -> tuple[str, ...]:
    """An id for each call: the model's own (rule 2), else `fresh()` (rule 3)."""
    ids: list[str] = []
    for call_id in written:
        ids.append(
            call_id
            if call_id is not None and has_form(call_id) and call_id not in ids
            else _fresh(fresh, ids)
        )
    return tuple(ids)


def _fresh(fresh: Callable[[], str], taken: Sequence[str]) -> str:
    while True:
        made = fresh()
        if not has_form(made):
            raise ValueError(f"a new call id must be {CALL_ID.pattern}, not {made!r}")
        if made not in taken:
            return made
