"""memoryd's write rules (003 sections 6.3, 7 and 11): where a write lands. Pure; no I/O.

`judge_write(kind, text, session_untrusted)` answers, in this order:

0. Too large: an identity write (kind `memory` or `user`) whose text could not
   fit the memory block even alone under its heading (`core.model.memory_block`, rule
   4) is refused with the rule `over-budget`, its answer naming the limit: it
   could never reach a prompt. Nothing is written or journalled.
1. Refuse: any finding of `refuse(text, memory=True)` refuses the write, naming
   the first finding's rule. Nothing is written or journalled; the answer is the
   rule's sentence and `see runbook.md#memory-write-refused`.
2. Flag: `flag(text)`'s first finding names the rule the write matched (or none).
3. An identity write (kind `memory` or `user`) that matched a flag rule lands in
   notes.md as an untrusted note, action `flagged-to-note`, with the exact answer
   of 003 6.3 (`not added to memory.md: it matches the rule <name>, so it was saved
   in notes.md as an untrusted note.`), whatever the session.
4. An identity write from a session that has read untrusted content lands in
   notes.md as an untrusted note, action `untrusted-to-note` (taint is the
   control, the sanitizer only defence in depth: 003 section 11).
5. Any other identity write lands in its own file, trusted.
6. A note lands in notes.md, marked untrusted when it matched a flag rule, its
   session has read untrusted content or its caller marked it; trusted otherwise.

A `Placement` can only be built here (`judge_write`): the store writes nothing
that did not pass these rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from boxmaker.core.model.memory_block import BLOCK_BYTES, OVER_BUDGET, alone_bytes
from boxmaker.core.runbook import Runbook
from boxmaker.core.sanitize import RULES, flag, refuse
from boxmaker.memoryd.files import FILES, IDENTITY_KINDS

_TOKEN = object()


class WriteAction(StrEnum):
    """What a write did, as the journal records it. Values are never renamed."""

    ADDED = "added"
    REPLACED = "replaced"
    CONSOLIDATED = "consolidated"
    NOTED = "noted"
    FLAGGED_TO_NOTE = "flagged-to-note"
    UNTRUSTED_TO_NOTE = "untrusted-to-note"


@dataclass(frozen=True)
class Refused:
    """A write refused by rule 1: nothing is written or journalled."""

    rule: str
    answer: str


@dataclass(frozen=True)
class Placement:
    """Where a write that passed the refuse rules lands (rules 2 to 6)."""

    kind: str  # the file it lands in: "memory" | "user" | "note"
    untrusted: bool  # the entry is marked untrusted
    demoted: WriteAction | None  # FLAGGED_TO_NOTE or UNTRUSTED_TO_NOTE for an identity write
    rule: str | None  # the flag rule the text matched, if any
    reason: str | None  # why it was lowered or marked, as the answer says it
    _token: object = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("a Placement is built only by judge_write")


def refusal_answer(rule: str) -> str:
    """The one-line answer to a refused write."""
    sentence = RULES[rule].description if rule in RULES else "A sanitizer rule."
    return (
        f"not written: it matches the rule {rule} ({sentence.rstrip('.')}); "
        f"{Runbook.MEMORY_WRITE_REFUSED.pointer}"
    )


def too_large_answer(size: int) -> str:
    """The one-line answer to an identity write too large for the memory block."""
    return (
        f"not written: with its heading this entry is {size:,} bytes, and the memory "
        f"block holds at most {BLOCK_BYTES:,}; save a shorter entry, or keep the long "
        "text with memory_note."
    )


UNTRUSTED_REASON = "this session has read untrusted content"
MARKED_REASON = "it was written as untrusted"


def judge_write(
    kind: str, text: str, session_untrusted: bool, marked_untrusted: bool = False
) -> Refused | Placement:
    """Where a write of `text` as `kind` lands (the module docstring's rules, in order);
    `marked_untrusted` is a note its caller asked to keep untrusted."""
    if kind not in FILES:
        raise ValueError(f"unknown kind of entry: {kind!r}")
    if kind in IDENTITY_KINDS and (size := alone_bytes(kind, text)) > BLOCK_BYTES:
        return Refused(OVER_BUDGET, too_large_answer(size))
    refused = refuse(text, memory=True)
    if refused:
        return Refused(refused[0].rule, refusal_answer(refused[0].rule))
    flagged = flag(text)
    rule = flagged[0].rule if flagged else None
    if kind in IDENTITY_KINDS:
        if rule is not None:
            reason = f"it matches the rule {rule}"
            return Placement("note", True, WriteAction.FLAGGED_TO_NOTE, rule, reason, _TOKEN)
        if session_untrusted:
            return Placement(
                "note", True, WriteAction.UNTRUSTED_TO_NOTE, None, UNTRUSTED_REASON, _TOKEN
            )
        return Placement(kind, False, None, None, None, _TOKEN)
    if rule is not None:
        return Placement("note", True, None, rule, f"it matches the rule {rule}", _TOKEN)
    if session_untrusted:
        return Placement("note", True, None, None, UNTRUSTED_REASON, _TOKEN)
    if marked_untrusted:
        return Placement("note", True, None, None, MARKED_REASON, _TOKEN)
    return Placement("note", False, None, None, None, _TOKEN)


def demoted_answer(kind: str, reason: str) -> str:
    """The answer to an identity write that became an untrusted note (003 6.3's form)."""
    return (
        f"not added to {FILES[kind]}: {reason}, so it was saved in notes.md as an untrusted note."
    )
