"""A session's prompt: its log rendered in the model's dialect and tokenized, and the
neutralising of every text that did not come from the model.

I/O: none of its own; the model's tokenizer. Used by `loopd.turn` and the parts it
drives (`loopd.tool_runs`, `loopd.compaction`).

Neutralising (003 sections 6.2 and 8). Text that did not come from the model is
neutralised (`boxmaker.core.sanitize.neutralise`: each listed tag's angle brackets
become look-alikes) when it is first appended to the log, so the log holds the
neutralised text and every later prompt replays exactly those bytes:

    the owner's (and other speakers') messages    UserEntry.text, when a turn starts
    tool results, loopd's own and brokerd's       ToolEntry.content (`loopd.tool_runs`),
      (already capped by whoever produced them)     before the model or anyone sees it
    the memory block, when there is one           MemoryEntry.text, when a new session
                                                    starts, before the owner's text
    a compaction's summary                        CompactionEntry.summary

The model's own output (ModelEntry: its text and its ids) is never touched. Only the
count of tags disarmed is logged (`event=neutralised`), never the text.

The list: `markers`, the loaded model's marker texts (`loopd.markers`), plus the
dialect's own scaffolding, reasoning markers and call openers, so a model whose list
misses them is still safe. An empty `markers` (no list loaded: the demo model, tests
that predate the list) neutralises nothing; the scaffolding is then kept out by
tokenizing text without special parsing alone. A tag with no bracket to disarm cannot
be neutralised: ValueError when the prompter is made, not mid-turn.

The system turn is the system prompt, the memory block (`loopd.memory_fit`) and the
latest compaction's summary, a blank line between each. Formats with a system role
(chatml, llama3, phi3) send it as their system turn; those without one (gemma,
mistral) open the first user turn with it (`ChatFormat.render`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from boxmaker.core.model.chat_format import Segment, Tokens, Turn
from boxmaker.core.model.compaction_plan import summary_block
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.template_prompt import Stretches
from boxmaker.core.sanitize import neutralise
from boxmaker.loopd.model import Model
from boxmaker.loopd.session_log import SessionLog
from boxmaker.loopd.tools import system_prompt

log = logging.getLogger(__name__)

CACHED_SESSIONS = 16

_V = TypeVar("_V")


def _recent(cache: OrderedDict[str, _V], session: str, make: Callable[[], _V]) -> _V:
    """`session`'s entry in `cache` (made if new), now its most recent; the oldest past
    CACHED_SESSIONS are dropped (a dropped session is rendered again, never wrongly)."""
    if session not in cache:
        cache[session] = make()
    cache.move_to_end(session)
    while len(cache) > CACHED_SESSIONS:
        cache.popitem(last=False)
    return cache[session]


def neutralising_tags(dialect: Dialect, markers: Sequence[str]) -> tuple[str, ...]:
    """What neutralising disarms: `markers`, the dialect's scaffolding, its reasoning
    markers and call openers (none when `markers` is empty); ValueError for a tag that
    cannot be neutralised."""
    if not markers:
        return ()
    reasoning = (dialect.reasoning.open, dialect.reasoning.close) if dialect.reasoning else ()
    extra = (*dialect.markers, *reasoning, *dialect.marked_openers)
    tags = tuple(dict.fromkeys(t for t in (*markers, *extra) if t))
    neutralise("", tags)  # a tag with no bracket to disarm fails here, not in a turn
    return tags


class Prompter:
    """Renders a session's log as token ids, the session's own prompt cached while its
    log only grows (the last CACHED_SESSIONS sessions)."""

    def __init__(self, model: Model, dialect: Dialect, markers: Sequence[str]) -> None:
        self._model = model
        self.dialect = dialect
        self.tags = neutralising_tags(dialect, markers)
        self.system = system_prompt(dialect.teach, dialect.prompt_teaches_syntax)
        # each session's prompt as rendered so far, and its segments' token ids
        self._stretches: OrderedDict[str, Stretches] = OrderedDict()
        self._tokens: OrderedDict[str, list[tuple[Segment, list[int]]]] = OrderedDict()

    def neutralised(self, session: str, entry: str, text: str) -> str:
        """`text` with the listed tags disarmed, the count (never the text) logged."""
        result = neutralise(text, self.tags)
        if result.count:
            log.info("event=neutralised session=%s entry=%s count=%d", session, entry, result.count)
        return result.text

    def count(self, text: str) -> int:
        """`text`'s length in tokens, tokenized as text (no special parsing)."""
        return len(self._model.tokenize(text, special=False))

    def prompt(self, session_log: SessionLog) -> list[int]:
        """The token ids of the next prompt for this session, rendered from its log."""
        return self.render(session_log, self.system_of(session_log), session_log.turns())

    def system_of(self, session_log: SessionLog) -> str:
        """The system turn's text: the system prompt, the memory block, and the latest
        compaction's summary, a blank line between each."""
        compaction = session_log.compaction
        if compaction is None:
            return "\n\n".join((self.system, *session_log.memory))
        return self.headed(session_log, compaction.summary, compaction.dropped)

    def headed(self, session_log: SessionLog, summary: str, dropped: int) -> str:
        """The system turn with `summary` (of `dropped` older turns) as its summary."""
        return "\n\n".join((self.system, *session_log.memory, summary_block(summary, dropped)))

    def render(
        self, session_log: SessionLog, system: str, turns: Sequence[Turn], *, cached: bool = True
    ) -> list[int]:
        """`system` and `turns` as token ids. Cached (the default) only for the session's
        own prompt: its segments are reused while the log only grows, and a compaction
        starts the cache afresh (`cached=False` for any other prompt)."""
        key = f"{session_log.path.stem}/{len(session_log.compactions)}"
        cache = _recent(self._stretches, key, Stretches) if cached else Stretches()
        before = _recent(self._tokens, key, list) if cached else []
        made: list[tuple[Segment, list[int]]] = []
        ids: list[int] = []
        for at, segment in enumerate(self.dialect.render(system, turns, cache)):
            if at < len(before) and before[at][0] == segment:  # the same segment as last time
                part = before[at][1]
            elif isinstance(segment, Tokens):
                part = list(segment.ids)
            else:
                part = self._model.tokenize(segment.text, special=segment.special)
            made.append((segment, part))
            ids.extend(part)
        if cached:
            self._tokens[key] = made
        return ids
