"""One turn of a session: the owner's words in, the model's answer out, tools in between.

I/O: the session log, the model, the broker and memory ports (through their
seams). The turn's states, as transitions:

    START      open the log (damaged: refuse); a new session must not have a log,
               a resumed one must; a new one, when there is a memory port, asks
               memoryd for the memory block (no block: refuse, writing nothing)
               and appends it, neutralised, unless it is empty; append the
               owner's text, neutralised (below)                 -> GENERATE
    GENERATE   render the log as a prompt, generate, its content streamed as content
               events while the model writes (`core.model.reply_stream`: what could
               still be a tool call is held back); append the model's reply, with
               the calls read from it, each with its id (the model's own where it
               wrote one, else a new one: `core.model.call_ids`), which the prompt hands
               the template as calls; the rest of its content -> a content event,
               so a reply's content events together are exactly its content (a
               reply cut off by the turn's token bound is no answer: what was held
               back of it is not sent)
                 no tool calls, or the token budget spent        -> DONE
                 tool calls                                      -> TOOLS
    TOOLS      for each call, while under the tool-call bound: tool_call_started,
               run it (core tool, or brokerd through the port: approval_pending
               when it waits, tool_denied when denied), append the result,
               neutralised, with the id of the call it answers; tool_result
                                                                 -> GENERATE
               the bound reached                                 -> DONE (with a notice)
    DONE       tell memoryd a turn of the session was logged (`session_updated`,
               best effort: a failure is logged, not the turn's); turn_done with
               the final content and the session's trust

Every result the model reads is appended to the log before the model sees it,
and the log is the only source of prompts, so a replay sends what was evaluated.

Neutralising (003 sections 6.2 and 8). Text that did not come from the model is
neutralised (`boxmaker.core.sanitize.neutralise`: each listed tag's angle brackets
become look-alikes) when it is first appended to the log, so the log holds the
neutralised text and every later prompt replays exactly those bytes:

    the owner's (and other speakers') messages    UserEntry.text, at START
    tool results, loopd's own and brokerd's       ToolEntry.content, at TOOLS,
      (already capped by whoever produced them)     before the model or anyone sees it
    the memory block, when there is one           MemoryEntry.text, at START of a new
                                                    session, before the owner's text

The model's own output (ModelEntry: its text and its ids) is never touched. The
tool_result event carries the neutralised content: what the log holds and the
model read, so a client shows the owner what the model was shown. Only the count
of tags disarmed is logged (`event=neutralised`), never the text.

The memory block (`loopd.memory_port`, memoryd's soul.md and identity entries)
is asked for once, when a session begins; a resumed session replays the logged
entry and never asks again, so every prompt of a session carries the same
bytes, whatever memoryd holds by then. It is part of the system turn: the
system prompt, a blank line, then the block (cut to `block_tokens` by whole
entries: `loopd.memory_fit`). Formats with a system role
(chatml, llama3, phi3) send that as their system turn; those without one (gemma,
mistral) open the first user turn with it, as they do the system prompt alone
(`ChatFormat.render`). memoryd unreachable, or answering anything but a block,
refuses a new session (`unavailable`, runbook.md#memory-unavailable) before
anything is written; resumed sessions do not need it. No memory port (`[memory]
socket = "none"`, the demo) means no block.

The list: `markers`, the loaded model's marker texts (`loopd.markers`), plus the
chat format's own (`ChatFormat.markers`: begin of text, turn and role markers,
stops), so a model whose list misses them is still safe. An empty `markers` (no
list loaded: the demo model, tests that predate the list) neutralises nothing;
the scaffolding is then kept out by tokenizing text without special parsing
alone. A tag with no bracket to disarm cannot be neutralised: ValueError when
the loop is made, not mid-turn.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import BoxmakerError, ErrorCode
from boxmaker.core.grants.tools import TOOLS, RunsIn, tool_names
from boxmaker.core.labels import DataClass
from boxmaker.core.model import compaction_plan
from boxmaker.core.model.chat_format import ChatFormat, Role, Segment, Tokens, Turn
from boxmaker.core.model.compaction_plan import summary_block
from boxmaker.core.model.dialect import Dialect, from_format
from boxmaker.core.model.reasoning import ReasoningStream
from boxmaker.core.model.repetition import Repetition, find_repetition
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.model.result_cut import cut_result
from boxmaker.core.model.template_prompt import Stretches
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.model.tool_calls import BadToolCall, ToolCall, parse_reply
from boxmaker.core.runbook import Runbook
from boxmaker.core.sanitize import neutralise
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.messages import (
    ApprovalPendingEvent,
    ContentEvent,
    ContextCompactedEvent,
    DeniedResponse,
    Event,
    FailedResponse,
    PendingApprovalResponse,
    ReasoningEvent,
    ResultResponse,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolRequest,
    ToolResultEvent,
    TurnDone,
)
from boxmaker.loopd.broker_port import NOT_CONFIGURED, BrokerPort
from boxmaker.loopd.memory_fit import fit_memory
from boxmaker.loopd.memory_port import MemoryPort, MemoryUnavailableError
from boxmaker.loopd.model import ContextFullError, Model
from boxmaker.loopd.pacing import Paced
from boxmaker.loopd.session_log import (
    AnyEntry,
    CompactionEntry,
    MemoryEntry,
    ModelEntry,
    NoticeEntry,
    SessionLog,
    SessionLogs,
    ToolEntry,
    UserEntry,
    logged_calls,
)
from boxmaker.loopd.tools import SCHEMAS, denial_text, find_tools, system_prompt

log = logging.getLogger(__name__)


class TurnRefusedError(BoxmakerError):
    """The turn cannot start; the text says why in one line, `code` is the wire's."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MALFORMED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TurnLimits:
    max_tool_calls: int = 8
    max_tokens: int = 65_536  # generated in one turn, all replies together
    reply_tokens: int = 16_384  # one reply
    reasoning_tokens: int = 8_192  # of a reply, in reasoning: past it the block is closed
    # a reply is generated in stretches of this many tokens, and after each one that
    # does not end it, one that only repeats itself is stopped (`core.model.repetition`)
    repeat_check_tokens: int = 512
    stream_interval_s: float = 0.05  # streamed text merged within it (`loopd.pacing`)
    # a tool result's budget in the prompt (`core.model.result_cut`); None: never cut
    result_tokens: int | None = None
    # the model's context in tokens; None: unknown, and a session is never compacted
    context: int | None = None
    compact_at: float = 0.85  # of the context: a longer next prompt compacts first
    summary_tokens: int = 512  # a compaction's summary, at most
    keep_turns: int = 2  # the owner's last turns kept verbatim when they fit
    # a new session's memory block, at most (`loopd.memory_fit`); None: as memoryd sent it
    block_tokens: int | None = None


CACHED_SESSIONS = 16
SUMMARY_MARGIN = 16  # tokens kept free under the threshold for the summary's heading
MEMORY_CHANCE_MIN = 32  # a memory chance with less room than this is skipped


class _NoRoomError(BoxmakerError):
    """The system turn and the owner's last turn alone pass the threshold: the turn ends."""


def _called(call: ToolCall) -> str:
    """The tool a call runs: call_tool's inner name, else the call's own."""
    if call.name != "call_tool":
        return call.name
    try:
        inner = json.loads(call.arguments).get("name")
    except (ValueError, AttributeError):
        return call.name
    return inner if isinstance(inner, str) else call.name


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


@dataclass(frozen=True)
class _Reply:
    ids: tuple[int, ...]
    text: str  # all of it, reasoning included: what the log keeps
    finished: bool
    answer: str | None  # outside reasoning; None when the reply was cut off unfinished
    repeated: Repetition | None = None  # stopped because it only repeated itself


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    class_: DataClass = DataClass.PUBLIC
    untrusted: bool = False
    truncated: bool = False


class TurnLoop:
    def __init__(
        self,
        model: Model,
        chat_format: ChatFormat | Dialect,
        logs: SessionLogs,
        port: BrokerPort | None,
        limits: TurnLimits,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        markers: Sequence[str] = (),
        memory: MemoryPort | None = None,
    ) -> None:
        self._model = model
        dialect = chat_format if isinstance(chat_format, Dialect) else from_format(chat_format)
        self._dialect = dialect
        self._tags = self._tags_for(dialect, markers)
        self._logs = logs
        self._port = port
        self._memory = memory
        self._limits = limits
        self._clock = clock
        self._system = system_prompt(dialect.teach, dialect.prompt_teaches_syntax)
        self._stop = self._stop_ids()
        # each session's prompt as rendered so far, and its segments' token ids: reused
        # while the log only grows (the last CACHED_SESSIONS sessions)
        self._stretches: OrderedDict[str, Stretches] = OrderedDict()
        self._tokens: OrderedDict[str, list[tuple[Segment, list[int]]]] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @property
    def logs(self) -> SessionLogs:
        """The session logs this loop reads and appends to."""
        return self._logs

    @staticmethod
    def _tags_for(dialect: Dialect, markers: Sequence[str]) -> tuple[str, ...]:
        """What neutralising disarms: `markers`, the dialect's scaffolding, its reasoning
        markers and call openers (none when `markers` is empty); ValueError for a tag
        that cannot be neutralised."""
        if not markers:
            return ()
        reasoning = (dialect.reasoning.open, dialect.reasoning.close) if dialect.reasoning else ()
        extra = (*dialect.markers, *reasoning, *dialect.marked_openers)
        tags = tuple(dict.fromkeys(t for t in (*markers, *extra) if t))
        neutralise("", tags)  # a tag with no bracket to disarm fails here, not in a turn
        return tags

    def _neutralised(self, session: str, entry: str, text: str) -> str:
        """`text` with the listed tags disarmed, the count (never the text) logged."""
        result = neutralise(text, self._tags)
        if result.count:
            log.info("event=neutralised session=%s entry=%s count=%d", session, entry, result.count)
        return result.text

    def _stop_ids(self) -> set[int]:
        ids = set()
        for text in self._dialect.stop:
            tokens = self._model.tokenize(text, special=True)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return ids

    def _lock(self, session: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(session, threading.Lock())

    def prompt(self, session_log: SessionLog) -> list[int]:
        """The token ids of the next prompt for this session, rendered from its log."""
        return self._render(session_log, self._system_of(session_log), session_log.turns())

    def _system_of(self, session_log: SessionLog) -> str:
        """The system turn's text: the system prompt, the memory block, and the latest
        compaction's summary, a blank line between each."""
        compaction = session_log.compaction
        summary = (
            () if compaction is None else (summary_block(compaction.summary, compaction.dropped),)
        )
        return "\n\n".join((self._system, *session_log.memory, *summary))

    def _render(
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
        for at, segment in enumerate(self._dialect.render(system, turns, cache)):
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

    def run(self, session: str, text: str, resume: bool, emit: Callable[[Event], None]) -> TurnDone:
        with self._lock(session):
            session_log = self._logs.open(session)
            if session_log.entries and not resume:
                raise TurnRefusedError(
                    f"session {session} already exists; resume it or choose another id"
                )
            if resume and not session_log.entries:
                raise TurnRefusedError(f"session {session} has no log to resume")
            if not resume:
                self._remember(session, session_log)
            session_log.append(UserEntry(text=self._neutralised(session, "user", text)))
            final = self._loop(session, session_log, emit)
            if self._memory is not None:
                self._memory.session_updated(session)
            return TurnDone(session=session, content=final, untrusted=session_log.untrusted)

    def _remember(self, session: str, session_log: SessionLog) -> None:
        """A new session's memory block, neutralised, appended unless blank;
        TurnRefusedError (nothing written) when memoryd gives none."""
        if self._memory is None:
            return
        try:
            soul, entries = self._memory.block_parts(session)
        except MemoryUnavailableError as exc:
            raise TurnRefusedError(str(exc), ErrorCode.UNAVAILABLE) from exc
        block = fit_memory(
            session,
            soul,
            entries,
            self._limits.block_tokens,
            lambda text: len(self._model.tokenize(text, special=False)),
            self._tags,
        )
        if block.strip():
            session_log.append(MemoryEntry(text=self._neutralised(session, "memory", block)))

    def _loop(self, session: str, session_log: SessionLog, emit: Callable[[Event], None]) -> str:
        calls = 0
        generated = 0
        while True:
            budget = min(self._limits.reply_tokens, self._limits.max_tokens - generated)
            if budget <= 0:
                return f"The turn stopped: it used its {self._limits.max_tokens} tokens."
            prompt = self._prompt_or_refuse(session_log)
            if self._over(prompt):
                try:
                    self._compact(session, session_log, emit, len(prompt))
                except _NoRoomError as exc:
                    return str(exc)
                prompt = self._prompt_or_refuse(session_log)
            try:
                last = budget == self._limits.max_tokens - generated
                generation = self._reply(session, prompt, budget, last, emit)
            except ContextFullError:
                return (
                    f"The turn stopped: the conversation fills the model's context "
                    f"({len(prompt)} tokens); {Runbook.LOOPD_CONTEXT_FULL.pointer}."
                )
            generated += len(generation.ids)
            if generation.repeated is not None:
                # only repeating itself: unfinished, like a reply cut off by the budget
                session_log.append(
                    ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt))
                )
                log.info(
                    "event=reply_repeated session=%s period=%d tokens=%d",
                    session,
                    generation.repeated.period,
                    generation.repeated.tokens,
                )
                return (
                    f"The turn stopped: the model's reply repeated the same "
                    f"{generation.repeated.period} tokens {generation.repeated.copies} times."
                )
            if generation.answer is None:
                # cut off by the turn's bound: what it wrote is unfinished, not an answer,
                # and what was held back (perhaps half a tool call) is not shown
                session_log.append(
                    ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt))
                )
                return f"The turn stopped: it used its {self._limits.max_tokens} tokens."
            reply = parse_reply(generation.answer, self._dialect.syntax, SCHEMAS)
            logged = logged_calls(reply)
            session_log.append(
                ModelEntry(
                    text=generation.text, ids=generation.ids, prompt=len(prompt), calls=logged
                )
            )
            if not reply.calls:
                return reply.content
            for call, made in zip(reply.calls, logged, strict=True):
                if calls >= self._limits.max_tool_calls:
                    return (
                        f"The turn stopped: the model asked for more than "
                        f"{self._limits.max_tool_calls} tool calls."
                    )
                calls += 1
                self._tool(session, session_log, call, emit, answers=made.id)

    def _prompt_or_refuse(self, session_log: SessionLog) -> list[int]:
        try:
            return self.prompt(session_log)
        except TemplateError as exc:  # probed at start; this conversation breaks it
            raise TurnRefusedError(
                f"the model's chat template cannot render this session: "
                f"{escape_arguments(str(exc))}; "
                f"{Runbook.LOOPD_TEMPLATE_REFUSED.pointer}",
                ErrorCode.UNAVAILABLE,
            ) from exc

    def _threshold(self) -> int | None:
        context = self._limits.context
        return None if context is None else int(context * self._limits.compact_at)

    def _over(self, prompt: Sequence[int]) -> bool:
        threshold = self._threshold()
        return threshold is not None and len(prompt) > threshold

    def compact(self, session: str, emit: Callable[[Event], None]) -> TurnDone:
        """Compact `session` now, as its owner asked (`compact` on loop.sock): answered
        as a turn, its content one line saying what was done."""
        with self._lock(session):
            session_log = self._logs.open(session)
            if not session_log.entries:
                raise TurnRefusedError(f"session {session} has no log to compact")
            if self._limits.context is None:
                raise TurnRefusedError("this model's context is not known: loopd cannot compact")
            before = len(self._prompt_or_refuse(session_log))
            try:
                done = self._compact(session, session_log, emit, before)
            except _NoRoomError as exc:
                content = str(exc)
            else:
                content = (
                    f"Compacted: {done.before} tokens became {done.after}."
                    if done is not None
                    else "Nothing to compact: the owner's last turns are kept as they are."
                )
            return TurnDone(session=session, content=content, untrusted=session_log.untrusted)

    def _compact(
        self, session: str, session_log: SessionLog, emit: Callable[[Event], None], before: int
    ) -> CompactionEntry | None:
        """Replace the older turns with a summary the model writes (the steps below);
        the entry appended, or None when there is nothing older to replace.
        _NoRoomError when the system turn and the owner's last turn alone do not fit.

            1. the kept tail: the owner's last `keep_turns` turns, fewer when they
               leave no room under the threshold, at least the last one
            2. the turns before it, the oldest dropped while the system turn, they
               and the instruction leave no room for the summary's budget
            3. the model's one chance to save to memory: those turns and a notice,
               one reply, its memory tool calls run through brokerd as any call
               (the rest refused); skipped when it does not fit
            4. the summary: those turns and the instruction, the model's answer
               neutralised, appended as a compaction entry that names every entry
               it replaces (the older turns and step 3's); the owner sees
               `context_compacted`"""
        threshold, context = self._threshold(), self._limits.context
        assert threshold is not None
        assert context is not None
        live = session_log.live()
        kinds = [(at, e.type) for at, e in live]
        first = compaction_plan.plan(kinds, self._limits.keep_turns)
        # nothing older to summarise: only an earlier summary, cut to fit, may make room
        if first is None or not (first.turns or (session_log.compaction and before > threshold)):
            if before > threshold:
                raise _NoRoomError(self._no_room(before))
            return None
        system = self._system_of(session_log)
        headed = "\n\n".join((self._system, *session_log.memory, summary_block("", 0)))
        for keep in range(max(1, self._limits.keep_turns), 0, -1):
            found = compaction_plan.plan(kinds, keep)
            assert found is not None  # the same owner's turns as `first`
            tail = [(at, e) for at, e in live if at >= found.kept_from]
            base = self._render(session_log, headed, session_log.turns(tail), cached=False)
            room = threshold - len(base) - SUMMARY_MARGIN
            if room >= 0:
                break
        else:
            raise _NoRoomError(self._no_room(len(base)))
        budget = min(self._limits.summary_tokens, room)
        by_index = dict(live)
        older = list(found.turns)
        while True:
            shown = session_log.turns([(i, by_index[i]) for group in older for i in group])
            asked = [*shown, Turn(Role.USER, compaction_plan.SUMMARY_INSTRUCTION)]
            prompt = self._render(session_log, system, asked, cached=False)
            if len(prompt) + budget <= context or not older:
                break
            older.pop(0)
        dropped = len(found.turns) - len(older)
        chance = self._memory_chance(session, session_log, system, shown, emit) if older else ()
        summary = self._summary(session, prompt, budget) if older else ""
        if not older and session_log.compaction is not None:
            summary = session_log.compaction.summary  # nothing new seen: the old one stands
        summary = self._neutralised(session, "summary", summary)
        summary, after = self._fitted(session_log, summary, dropped, tail, threshold)
        if after > threshold:  # only when nothing older was left: no summary makes room
            raise _NoRoomError(self._no_room(after))
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
        """The summary, its tail cut off while the prompt after passes the threshold (a
        summary tokenized as text may count other than as generated), and that prompt's
        length."""
        while True:
            system = "\n\n".join(
                (self._system, *session_log.memory, summary_block(summary, dropped))
            )
            after = len(self._render(session_log, system, session_log.turns(tail), cached=False))
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
        """Step 3 of `_compact`: the log indices it appended (none when it did not fit).
        Its prompt is the system turn, the turns to be summarised and the notice."""
        assert self._limits.context is not None
        start = len(session_log.entries)
        try:
            prompt = self._render(
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
            generation = self._reply(session, prompt, budget, False, quiet, budget // 2)
        except ContextFullError:
            return range(start, len(session_log.entries))
        if generation.answer is None:
            session_log.append(
                ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt))
            )
            return range(start, len(session_log.entries))
        reply = parse_reply(generation.answer, self._dialect.syntax, SCHEMAS)
        logged = logged_calls(reply)
        session_log.append(
            ModelEntry(text=generation.text, ids=generation.ids, prompt=len(prompt), calls=logged)
        )
        memory_tools = frozenset(tool_names(RunsIn.MEMORYD))  # the table's memory rows
        bound = self._limits.max_tool_calls
        for call, made in list(zip(reply.calls, logged, strict=True))[:bound]:
            self._tool(session, session_log, call, emit, only=memory_tools, answers=made.id)
        return range(start, len(session_log.entries))

    def _summary(self, session: str, prompt: list[int], budget: int) -> str:
        """Step 3 of `_compact`: the model's summary (its answer, calls left out)."""
        if budget <= 0:
            return ""
        try:
            generation = self._reply(session, prompt, budget, False, lambda _: None, budget // 2)
        except ContextFullError:
            return ""
        if generation.answer is None:
            return ""
        return parse_reply(generation.answer, self._dialect.syntax, SCHEMAS).content.strip()

    def _reply(
        self,
        session: str,
        prompt: list[int],
        budget: int,
        last: bool,
        emit: Callable[[Event], None],
        reasoning_tokens: int | None = None,
    ) -> _Reply:
        """One reply of the model, streamed as reasoning and content events while it is
        written (`core.model.reasoning`, then `core.model.reply_stream`: what could still be a tool
        call is held back; `loopd.pacing`: at most one event an interval). Past the
        reasoning budget, an open reasoning block is closed (its closing marker
        appended, as the template spells it) and the model goes on to answer: the
        reply is then its ids, the marker's and the rest, in order. A reply cut off
        by the turn's bound (`last`) is no answer: what was held back is not sent.
        Generated in stretches of `repeat_check_tokens`: after each one that does not
        end it, a reply that only repeats itself (`core.model.repetition`) is stopped, and
        is no answer either (`repeated` says why)."""
        dialect = self._dialect
        thinking = ReasoningStream(
            dialect.reasoning, opened=dialect.opens_reasoning, openers=dialect.marked_openers
        )
        answer = ReplyStream(dialect.syntax)
        paced = Paced(emit, self._limits.stream_interval_s)
        thinks = self._limits.reasoning_tokens if reasoning_tokens is None else reasoning_tokens

        def on_text(piece: str) -> None:
            reasoning, content = thinking.feed(piece)
            paced.add(ReasoningEvent, reasoning)
            paced.add(ContentEvent, answer.feed(content) if content else "")
            paced.tick()

        ids: list[int] = []
        texts: list[str] = []
        finished = False
        repeated: Repetition | None = None
        while True:
            left = budget - len(ids)
            step = min(left, self._limits.repeat_check_tokens)
            if thinking.reasoning_open and dialect.reasoning is not None:
                step = min(step, max(1, thinks - len(ids)))
            generation = self._model.generate(
                session, prompt + ids, max_tokens=step, stop=self._stop, on_text=on_text
            )
            ids += generation.ids
            texts.append(generation.text)
            finished = generation.finished
            if finished or len(ids) >= budget or not generation.ids:
                break
            repeated = find_repetition(ids)
            if repeated is not None:
                break
            over = len(ids) >= thinks
            if over and thinking.reasoning_open and dialect.reasoning is not None:
                close = dialect.reasoning.close  # the budget is spent: close the block
                log.info("event=reasoning_closed session=%s tokens=%d", session, len(ids))
                ids += self._model.tokenize(close, special=True)
                texts.append(close)
                on_text(close)
        text = "".join(texts)
        if thinking.text != text:  # a model that broke on_text's contract
            log.warning("event=streamed_text_differs session=%s", session)
        reasoning, content = thinking.finish()
        paced.add(ReasoningEvent, reasoning)
        if repeated is not None or (last and not finished and len(ids) >= budget):
            paced.flush()  # what was held back (perhaps half a tool call) is not shown
            return _Reply(tuple(ids), text, finished, None, repeated)
        released = answer.feed(content) if content else ""
        paced.add(ContentEvent, released + answer.finish())
        paced.flush()
        split = thinking.split()
        if split.reasoning:
            log.info("event=reasoning session=%s chars=%d", session, len(split.reasoning))
        return _Reply(tuple(ids), text, finished, split.answer)

    def _sized(self, content: str) -> str | None:
        """What the model is shown of a tool result over its budget (`core.model.result_cut`:
        head, a marker, tail; cut after neutralising, never inside a tag); None when it
        fits as it is. The log keeps both, so the prompt is rendered again the same."""
        budget = self._limits.result_tokens
        if budget is None:
            return None
        cut = cut_result(
            content, budget, lambda text: len(self._model.tokenize(text, special=False)), self._tags
        )
        return cut.text if cut.cut else None

    def _tool(
        self,
        session: str,
        session_log: SessionLog,
        call: ToolCall | BadToolCall,
        emit: Callable[[Event], None],
        only: frozenset[str] | None = None,
        answers: str | None = None,
    ) -> None:
        """Run one call and log its result, with `answers`, the id of the model's call it
        answers; with `only`, a call to any other tool is not run (its result says so)."""
        call_id = f"c{uuid.uuid4().hex[:20]}"
        name = call.name if isinstance(call, ToolCall) else "unreadable"
        arguments = call.arguments if isinstance(call, ToolCall) else "{}"
        emit(ToolCallStartedEvent(call=call_id, name=name, arguments=arguments))
        if isinstance(call, BadToolCall):
            outcome = ToolOutcome(f"The tool call could not be read: {call.problem}")
        elif only is not None and _called(call) not in only:
            outcome = ToolOutcome(f"Not run: only these tools run now: {', '.join(sorted(only))}.")
        else:
            outcome = self._run(session, call_id, call, emit)
        content = self._neutralised(session, "tool", outcome.content)
        shown = self._sized(content)
        if shown is not None:
            log.info("event=result_cut session=%s call=%s chars=%d", session, call_id, len(content))
        session_log.append(
            ToolEntry(
                call=call_id,
                name=name,
                content=content,
                class_=outcome.class_,
                untrusted=outcome.untrusted,
                truncated=outcome.truncated,
                shown=shown,
                answers=answers,
            )
        )
        emit(
            ToolResultEvent(
                call=call_id,
                name=name,
                content=content,  # neutralised: what the log holds and the model reads
                class_=outcome.class_,
                untrusted=outcome.untrusted,
                truncated=outcome.truncated,
            )
        )

    def _run(
        self, session: str, call_id: str, call: ToolCall, emit: Callable[[Event], None]
    ) -> ToolOutcome:
        args = json.loads(call.arguments)
        if call.name == "clock":
            return ToolOutcome(f"The time is {format_timestamp(self._clock())} (UTC).")
        if call.name == "find_tool":
            query = args.get("query", "")
            return ToolOutcome(find_tools(query if isinstance(query, str) else ""))
        if call.name == "call_tool":
            tool, inner = args.get("name"), args.get("arguments", {})
            if not isinstance(tool, str) or not isinstance(inner, dict):
                return ToolOutcome(
                    'call_tool takes {"name": "<tool>", "arguments": {...}};'
                    " use find_tool to see the tools."
                )
            return self._broker(session, call_id, tool, json.dumps(inner, ensure_ascii=False), emit)
        if call.name in TOOLS:  # called directly: brokerd decides all the same
            return self._broker(session, call_id, call.name, call.arguments, emit)
        return ToolOutcome(
            f"There is no tool named {call.name!r}. Use find_tool to see the tools, "
            "then call_tool to run one."
        )

    def _broker(
        self, session: str, call_id: str, tool: str, arguments: str, emit: Callable[[Event], None]
    ) -> ToolOutcome:
        if self._port is None:
            return ToolOutcome(f"Failed: {NOT_CONFIGURED}.")
        request = ToolRequest(session=session, call=call_id, tool=tool, arguments=arguments)

        def pending(frame: PendingApprovalResponse) -> None:
            emit(ApprovalPendingEvent(approval=frame.approval, tool=tool, expires=frame.expires))

        response = self._port.call(request, pending)
        if isinstance(response, ResultResponse):
            return ToolOutcome(
                response.content, response.class_, response.untrusted, response.truncated
            )
        if isinstance(response, DeniedResponse):
            emit(ToolDeniedEvent(name=tool, reason=response.reason))
            return ToolOutcome(denial_text(response.reason, response.detail))
        assert isinstance(response, FailedResponse)
        return ToolOutcome(f"Failed: {response.message}.")
