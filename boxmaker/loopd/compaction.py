"""Compaction: a session's older turns replaced by a summary the model writes, when the
next prompt would pass the threshold (`compact_at` of the context) or the owner asks.

I/O: the session log, the model (through `loopd.replying`), brokerd for the memory
chance's calls (through `loopd.tool_runs`), events through `emit`.

The steps (`Compactor.compact`; which turns, by `core.model.compaction_plan`):

    1. the kept tail: the owner's last `keep_turns` turns, fewer when they leave no
       room under the threshold, at least the last one
    2. the turns before it, the oldest dropped while the system turn, they and the
       instruction leave no room for the summary's budget
    3. the model's one chance to save to memory: those turns and a notice, one reply,
       its memory tool calls run through brokerd as any call (the rest refused);
       skipped when it does not fit
    4. the summary: those turns and the instruction, the model's answer neutralised,
       appended as a compaction entry that names every entry it replaces (the older
       turns and step 3's); the owner sees `context_compacted`

The summary is cut from its tail while the prompt after passes the threshold (a
summary tokenized as text may count other than as generated). NoRoomError when the
system turn and the owner's last turn alone do not fit: the turn ends with its text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import BoxmakerError
from boxmaker.core.grants.tools import RunsIn, tool_names
from boxmaker.core.model import compaction_plan
from boxmaker.core.model.chat_format import Role, Turn
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.model.tool_calls import parse_reply
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.loop import ContentEvent, ContextCompactedEvent, Event, ReasoningEvent
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import ContextFullError, Model
from boxmaker.loopd.prompting import Prompter
from boxmaker.loopd.replying import Replier
from boxmaker.loopd.session_log import (
    AnyEntry,
    CompactionEntry,
    ModelEntry,
    NoticeEntry,
    SessionLog,
    logged_calls,
)
from boxmaker.loopd.tool_runs import ToolRunner
from boxmaker.loopd.tools import SCHEMAS

log = logging.getLogger(__name__)

SUMMARY_MARGIN = 16  # tokens kept free under the threshold for the summary's heading
MEMORY_CHANCE_MIN = 32  # a memory chance with less room than this is skipped


class NoRoomError(BoxmakerError):
    """The system turn and the owner's last turn alone pass the threshold: the turn ends."""


class Compactor:
    def __init__(
        self,
        model: Model,
        prompter: Prompter,
        replier: Replier,
        tools: ToolRunner,
        limits: TurnLimits,
    ) -> None:
        self._model = model
        self._prompter = prompter
        self._replier = replier
        self._tools = tools
        self._limits = limits

    def threshold(self) -> int | None:
        """The prompt length past which a session is compacted; None: never."""
        context = self._limits.context
        return None if context is None else int(context * self._limits.compact_at)

    def over(self, prompt: Sequence[int]) -> bool:
        threshold = self.threshold()
        return threshold is not None and len(prompt) > threshold

    def compact(
        self, session: str, session_log: SessionLog, emit: Callable[[Event], None], before: int
    ) -> CompactionEntry | None:
        """The steps above, for a session whose prompt is `before` tokens long: the entry
        appended, or None when there is nothing older to replace."""
        threshold, context = self.threshold(), self._limits.context
        assert threshold is not None
        assert context is not None
        live = session_log.live()
        kinds = [(at, e.type) for at, e in live]
        first = compaction_plan.plan(kinds, self._limits.keep_turns)
        # nothing older to summarise: only an earlier summary, cut to fit, may make room
        if first is None or not (first.turns or (session_log.compaction and before > threshold)):
            if before > threshold:
                raise NoRoomError(self._no_room(before))
            return None
        prompter = self._prompter
        system = prompter.system_of(session_log)
        headed = prompter.headed(session_log, "", 0)
        for keep in range(max(1, self._limits.keep_turns), 0, -1):
            found = compaction_plan.plan(kinds, keep)
            assert found is not None  # the same owner's turns as `first`
            tail = [(at, e) for at, e in live if at >= found.kept_from]
            base = prompter.render(session_log, headed, session_log.turns(tail), cached=False)
            room = threshold - len(base) - SUMMARY_MARGIN
            if room >= 0:
                break
        else:
            raise NoRoomError(self._no_room(len(base)))
        budget = min(self._limits.summary_tokens, room)
        by_index = dict(live)
        older = list(found.turns)
        while True:
            shown = session_log.turns([(i, by_index[i]) for group in older for i in group])
            asked = [*shown, Turn(Role.USER, compaction_plan.SUMMARY_INSTRUCTION)]
            prompt = prompter.render(session_log, system, asked, cached=False)
            if len(prompt) + budget <= context or not older:
                break
            older.pop(0)
        dropped = len(found.turns) - len(older)
        chance = self._memory_chance(session, session_log, system, shown, emit) if older else ()
        summary = self._summary(session, prompt, budget) if older else ""
        if not older and session_log.compaction is not None:
            summary = session_log.compaction.summary  # nothing new seen: the old one stands
        summary = prompter.neutralised(session, "summary", summary)
        summary, after = self._fitted(session_log, summary, dropped, tail, threshold)
        if after > threshold:  # only when nothing older was left: no summary makes room
            raise NoRoomError(self._no_room(after))
        entry = CompactionEntry(
            summary=summary,
            replaces=compaction_plan.spans([*(i for g in found.turns for i in g), *chance]),
            dropped=dropped,
            before=before,
            after=after,
            untrusted=session_log.untrusted,
        )
        session_log.append(entry)
        log.info(
            "event=context_compacted session=%s before=%d after=%d dropped=%d kept_from=%d",
            session,
            before,
            after,
            dropped,
            found.kept_from,
        )
        emit(ContextCompactedEvent(before=before, after=after))
        return entry

    def _fitted(
        self,
        session_log: SessionLog,
        summary: str,
        dropped: int,
        tail: Sequence[tuple[int, AnyEntry]],
        threshold: int,
    ) -> tuple[str, int]:
        """The summary, its tail cut off while the prompt after passes the threshold, and
        that prompt's length."""
        while True:
            system = self._prompter.headed(session_log, summary, dropped)
            turns = session_log.turns(tail)
            after = len(self._prompter.render(session_log, system, turns, cached=False))
            if after <= threshold or not summary:
                return summary, after
            ids = self._model.tokenize(summary, special=False)
            summary = self._model.detokenize(ids[: max(0, len(ids) - (after - threshold) - 1)])

    def _no_room(self, tokens: int) -> str:
        return (
            f"The turn stopped: the system text, the memory block and the owner's last turn "
            f"alone take {tokens} tokens, more than the model's context allows "
            f"({self._limits.context}); {Runbook.LOOPD_CONTEXT_FULL.pointer}."
        )

    def _memory_chance(
        self,
        session: str,
        session_log: SessionLog,
        system: str,
        older: list[Turn],
        emit: Callable[[Event], None],
    ) -> range:
        """Step 3: the log indices it appended (none when it did not fit). Its prompt is
        the system turn, the turns to be summarised and the notice."""
        assert self._limits.context is not None
        start = len(session_log.entries)
        try:
            prompt = self._prompter.render(
                session_log,
                system,
                [*older, Turn(Role.USER, compaction_plan.MEMORY_CHANCE)],
                cached=False,
            )
        except TemplateError as exc:
            why = escape_arguments(str(exc))
            log.info("event=memory_chance_skipped session=%s why=template: %s", session, why)
            return range(start, start)
        budget = min(self._limits.summary_tokens, self._limits.context - len(prompt))
        if budget < MEMORY_CHANCE_MIN:
            log.info("event=memory_chance_skipped session=%s why=no room", session)
            return range(start, start)
        session_log.append(NoticeEntry(text=compaction_plan.MEMORY_CHANCE))

        def quiet(event: Event) -> None:  # its words are not the turn's answer
            if not isinstance(event, ReasoningEvent | ContentEvent):
                emit(event)

        try:
            generation = self._replier.reply(session, prompt, budget, False, quiet, budget // 2)
        except ContextFullError:
            return range(start, len(session_log.entries))
        if generation.answer is None:
            session_log.append(
                ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt))
            )
            return range(start, len(session_log.entries))
        reply = parse_reply(generation.answer, self._prompter.dialect.syntax, SCHEMAS)
        logged = logged_calls(reply)
        session_log.append(
            ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt), calls=logged)
        )
        memory_tools = frozenset(tool_names(RunsIn.MEMORYD))  # the table's memory rows
        bound = self._limits.max_tool_calls
        for call, made in list(zip(reply.calls, logged, strict=True))[:bound]:
            self._tools.run(session, session_log, call, emit, only=memory_tools, answers=made.id)
        return range(start, len(session_log.entries))

    def _summary(self, session: str, prompt: list[int], budget: int) -> str:
        """Step 4: the model's summary (its answer, calls left out)."""
        if budget <= 0:
            return ""
        try:
            generation = self._replier.reply(
                session, prompt, budget, False, lambda _: None, budget // 2
            )
        except ContextFullError:
            return ""
        if generation.answer is None:
            return ""
        return parse_reply(
            generation.answer, self._prompter.dialect.syntax, SCHEMAS
        ).content.strip()
