"""One turn of a session: the owner's words in, the model's answer out, tools in between.

I/O: the session log, the model, the broker and memory ports (through their
seams). The turn's states, as transitions:

    START      open the log (damaged: refuse); a new session must not have a log,
               a resumed one must; a new one, when there is a memory port, asks
               memoryd for the memory block (no block: refuse, writing nothing)
               and appends it, neutralised, unless it is empty; append the
               owner's text, neutralised (below)                 -> GENERATE
    GENERATE   render the log as a prompt, generate, its content streamed as content
               events while the model writes (`core.reply_stream`: what could
               still be a tool call is held back); append the model's reply; the
               rest of its content -> a content event, so a reply's content events
               together are exactly its content (a reply cut off by the turn's
               token bound is no answer: what was held back of it is not sent)
                 no tool calls, or the token budget spent        -> DONE
                 tool calls                                      -> TOOLS
    TOOLS      for each call, while under the tool-call bound: tool_call_started,
               run it (core tool, or brokerd through the port: approval_pending
               when it waits, tool_denied when denied), append the result,
               neutralised; tool_result                          -> GENERATE
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
system prompt, a blank line, then the block. Formats with a system role
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

from boxmaker.core.chat_format import ChatFormat, Segment, Tokens
from boxmaker.core.dialect import Dialect, from_format
from boxmaker.core.errors import ErrorCode
from boxmaker.core.labels import DataClass
from boxmaker.core.messages import (
    ApprovalPendingEvent,
    ContentEvent,
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
from boxmaker.core.reasoning import ReasoningStream
from boxmaker.core.reply_stream import ReplyStream
from boxmaker.core.result_cut import cut_result
from boxmaker.core.runbook import Runbook
from boxmaker.core.sanitize import neutralise
from boxmaker.core.template_prompt import Stretches
from boxmaker.core.template_sandbox import TemplateError
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.tool_calls import BadToolCall, ToolCall, parse_reply
from boxmaker.loopd.broker_port import NOT_CONFIGURED, BrokerPort
from boxmaker.loopd.memory_port import MemoryPort, MemoryUnavailableError
from boxmaker.loopd.model import ContextFullError, Model
from boxmaker.loopd.pacing import Paced
from boxmaker.loopd.session_log import (
    MemoryEntry,
    ModelEntry,
    SessionLog,
    SessionLogs,
    ToolEntry,
    UserEntry,
)
from boxmaker.loopd.tools import BROKER_TOOLS, SCHEMAS, denial_text, find_tools, system_prompt

log = logging.getLogger(__name__)


class TurnRefusedError(Exception):
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
    stream_interval_s: float = 0.05  # streamed text merged within it (`loopd.pacing`)
    # a tool result's budget in the prompt (`core.result_cut`); None: never cut
    result_tokens: int | None = None


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


@dataclass(frozen=True)
class _Reply:
    ids: tuple[int, ...]
    text: str  # all of it, reasoning included: what the log keeps
    finished: bool
    answer: str | None  # outside reasoning; None when the reply was cut off unfinished


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
        session = session_log.path.stem
        system = "\n\n".join((self._system, *session_log.memory))
        cache = _recent(self._stretches, session, Stretches)
        before = _recent(self._tokens, session, list)
        made: list[tuple[Segment, list[int]]] = []
        ids: list[int] = []
        for at, segment in enumerate(self._dialect.render(system, session_log.turns(), cache)):
            if at < len(before) and before[at][0] == segment:  # the same segment as last time
                part = before[at][1]
            elif isinstance(segment, Tokens):
                part = list(segment.ids)
            else:
                part = self._model.tokenize(segment.text, special=segment.special)
            made.append((segment, part))
            ids.extend(part)
        self._tokens[session] = made
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
            block = self._memory.block(session)
        except MemoryUnavailableError as exc:
            raise TurnRefusedError(str(exc), ErrorCode.UNAVAILABLE) from exc
        if block.strip():
            session_log.append(MemoryEntry(text=self._neutralised(session, "memory", block)))

    def _loop(self, session: str, session_log: SessionLog, emit: Callable[[Event], None]) -> str:
        calls = 0
        generated = 0
        while True:
            budget = min(self._limits.reply_tokens, self._limits.max_tokens - generated)
            if budget <= 0:
                return f"The turn stopped: it used its {self._limits.max_tokens} tokens."
            try:
                prompt = self.prompt(session_log)
            except TemplateError as exc:  # probed at start; this conversation breaks it
                raise TurnRefusedError(
                    f"the model's chat template cannot render this session: {exc}; "
                    f"{Runbook.LOOPD_TEMPLATE_REFUSED.pointer}",
                    ErrorCode.UNAVAILABLE,
                ) from exc
            try:
                last = budget == self._limits.max_tokens - generated
                generation = self._reply(session, prompt, budget, last, emit)
            except ContextFullError:
                return (
                    f"The conversation no longer fits the model's context ({len(prompt)} "
                    "tokens); start a new session."
                )
            generated += len(generation.ids)
            session_log.append(ModelEntry(text=generation.text, ids=generation.ids))
            if not generation.finished and generated >= self._limits.max_tokens:
                # cut off by the turn's bound: what it wrote is unfinished, not an answer,
                # and what was held back (perhaps half a tool call) is not shown
                return f"The turn stopped: it used its {self._limits.max_tokens} tokens."
            assert generation.answer is not None
            reply = parse_reply(generation.answer, self._dialect.syntax, SCHEMAS)
            if not reply.calls:
                return reply.content
            for call in reply.calls:
                if calls >= self._limits.max_tool_calls:
                    return (
                        f"The turn stopped: the model asked for more than "
                        f"{self._limits.max_tool_calls} tool calls."
                    )
                calls += 1
                self._tool(session, session_log, call, emit)

    def _reply(
        self,
        session: str,
        prompt: list[int],
        budget: int,
        last: bool,
        emit: Callable[[Event], None],
    ) -> _Reply:
        """One reply of the model, streamed as reasoning and content events while it is
        written (`core.reasoning`, then `core.reply_stream`: what could still be a tool
        call is held back; `loopd.pacing`: at most one event an interval). Past the
        reasoning budget, an open reasoning block is closed (its closing marker
        appended, as the template spells it) and the model goes on to answer: the
        reply is then its ids, the marker's and the rest, in order. A reply cut off
        by the turn's bound (`last`) is no answer: what was held back is not sent."""
        dialect = self._dialect
        thinking = ReasoningStream(
            dialect.reasoning, opened=dialect.opens_reasoning, openers=dialect.marked_openers
        )
        answer = ReplyStream(dialect.syntax)
        paced = Paced(emit, self._limits.stream_interval_s)

        def on_text(piece: str) -> None:
            reasoning, content = thinking.feed(piece)
            paced.add(ReasoningEvent, reasoning)
            paced.add(ContentEvent, answer.feed(content) if content else "")
            paced.tick()

        ids: list[int] = []
        texts: list[str] = []
        finished = False
        while True:
            left = budget - len(ids)
            step = left
            if thinking.reasoning_open and dialect.reasoning is not None:
                step = min(left, max(1, self._limits.reasoning_tokens - len(ids)))
            generation = self._model.generate(
                session, prompt + ids, max_tokens=step, stop=self._stop, on_text=on_text
            )
            ids += generation.ids
            texts.append(generation.text)
            finished = generation.finished
            if finished or len(ids) >= budget or not generation.ids:
                break
            over = len(ids) >= self._limits.reasoning_tokens
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
        if last and not finished and len(ids) >= budget:
            paced.flush()
            return _Reply(tuple(ids), text, finished, None)
        released = answer.feed(content) if content else ""
        paced.add(ContentEvent, released + answer.finish())
        paced.flush()
        split = thinking.split()
        if split.reasoning:
            log.info("event=reasoning session=%s chars=%d", session, len(split.reasoning))
        return _Reply(tuple(ids), text, finished, split.answer)

    def _sized(self, content: str) -> str | None:
        """What the model is shown of a tool result over its budget (`core.result_cut`:
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
    ) -> None:
        call_id = f"c{uuid.uuid4().hex[:20]}"
        name = call.name if isinstance(call, ToolCall) else "unreadable"
        arguments = call.arguments if isinstance(call, ToolCall) else "{}"
        emit(ToolCallStartedEvent(call=call_id, name=name, arguments=arguments))
        if isinstance(call, BadToolCall):
            outcome = ToolOutcome(f"The tool call could not be read: {call.problem}")
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
        if call.name in BROKER_TOOLS:  # called directly: brokerd decides all the same
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
