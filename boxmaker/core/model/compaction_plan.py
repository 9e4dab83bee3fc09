"""Which entries of a session log a compaction replaces, and the fixed words it uses.

Pure; no I/O. A compaction (`loopd.turn`, "Compaction") replaces the older part of
a conversation with a summary the model writes, and keeps the owner's last few
turns as they are. The rules:

1. **Turns are whole.** An owner's turn is a user entry and everything after it
   up to the next user entry (the model's replies, tool results). The tail kept
   verbatim starts at a user entry, so a template that wants the owner first
   after the system turn gets it.
2. **What is summarised** is every live entry (one no earlier compaction
   replaced) before the kept tail.
3. **Dropping.** When the summary's own prompt would not fit, the oldest turns
   of what is summarised are left out of it, whole, first; they are replaced all
   the same, and counted (`dropped`).
4. **Spans.** What a compaction replaces is written as spans of entry indices
   `[start, end)`, in order and not touching, so a reader of the log sees exactly
   which entries the summary stands for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NOTICE_PREFIX = "[boxmaker]"

# loopd's words to the model after its reply was stopped by the owner (issue 42)
INTERRUPTED = (
    f"{NOTICE_PREFIX} The owner stopped your last reply before it was done; it is kept "
    "as far as you wrote it. Wait for the owner's next message."
)
STOPPED_BETWEEN = (
    f"{NOTICE_PREFIX} The owner stopped this turn before your next step: a call that "
    "waited for approval did not run, and no other was made. Wait for the owner's next message."
)

# loopd's words to the model before compacting: its one chance to save to memory
MEMORY_CHANCE = (
    f"{NOTICE_PREFIX} This conversation is about to be compacted: its older turns will be "
    "replaced by a short summary. If something in them must outlast this session, save it "
    "now with memory_add or memory_note (through call_tool). Only the memory tools run "
    "now. If there is nothing to save, answer: nothing to save."
)

# the instruction the summary is written to, after the turns it summarises
SUMMARY_INSTRUCTION = (
    f"{NOTICE_PREFIX} Write a summary of the conversation so far, for yourself, to stand "
    "in for it from now on: what the owner asked for, what was done and found (tool "
    "results that matter, with paths, names and figures), what was decided, and what is "
    "still to do. Keep what an earlier summary says that still matters. Plain sentences, "
    "no tool calls, no greeting."
)

SUMMARY_HEADING = "A summary of the earlier conversation (written by you, at loopd's request):"


def compacted_line(before: int, after: int) -> str:
    """The `context_compacted` event as the owner reads it (bxctl, the Mattermost thread):
    loopd's numbers only, so nothing in it needs escaping."""
    return f"context compacted: {before:,} -> {after:,} tokens"


def summary_block(summary: str, dropped: int) -> str:
    """The text the summary is rendered as, in the system turn."""
    note = ""
    if dropped:
        turns = "turn" if dropped == 1 else "turns"
        note = (
            f"\n({dropped} earlier owner {turns} did not fit in the summary's own prompt "
            "and are left out of it.)"
        )
    return f"{SUMMARY_HEADING}\n{summary.strip() or '(no summary was written)'}{note}"


Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Plan:
    kept_from: int  # the log index the verbatim tail starts at (a user entry)
    turns: tuple[tuple[int, ...], ...]  # what is summarised, owner turn by owner turn


def owner_turns(live: Sequence[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """The live entries (index, type) grouped by owner turn; entries before the first
    user entry form a group of their own."""
    groups: list[list[tuple[int, str]]] = []
    for index, kind in live:
        if kind == "user" or not groups:
            groups.append([])
        groups[-1].append((index, kind))
    return groups


def plan(live: Sequence[tuple[int, str]], keep_turns: int) -> Plan | None:
    """Keep the last `keep_turns` owner turns (at least one), summarise the rest (none,
    when every live turn is kept); None when there is no owner's turn at all."""
    groups = owner_turns(live)
    starts = [g[0][0] for g in groups if g[0][1] == "user"]
    if not starts:
        return None
    kept_from = starts[-max(1, min(keep_turns, len(starts)))]
    older = tuple(tuple(i for i, _ in g) for g in groups if g[0][0] < kept_from)
    return Plan(kept_from, older)


def spans(indices: Iterable[int]) -> tuple[Span, ...]:
    """Sorted indices as `[start, end)` spans, consecutive ones merged."""
    out: list[list[int]] = []
    for index in sorted(set(indices)):
        if out and out[-1][1] == index:
            out[-1][1] = index + 1
        else:
            out.append([index, index + 1])
    return tuple((a, b) for a, b in out)


def covered(replaces: Iterable[Span]) -> set[int]:
    """Every index the spans cover."""
    return {i for start, end in replaces for i in range(start, end)}
