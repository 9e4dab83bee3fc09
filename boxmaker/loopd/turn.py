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

Neutralising (003 sections 6.2 and 8): the owner's text, the memory block, tool
results and summaries are neutralised when first appended to the log, so the log holds
the neutralised text and every later prompt replays exactly those bytes; the model's
own output is never touched (`loopd.prompting` lists what and how). The tool_result
event carries the neutralised content: what the log holds and the model read.

The parts: `loopd.prompting` renders the log as a prompt, `loopd.replying` generates
one reply, `loopd.tool_runs` runs one call and logs its result, `loopd.compaction`
replaces older turns with a summary. This module holds the states above.

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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import BoxmakerError, ErrorCode
from boxmaker.core.model.compaction_plan import INTERRUPTED, STOPPED_BETWEEN
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.model.tool_calls import parse_reply
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.loop import Event, TurnDone, UsageEvent
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.compaction import Compactor, NoRoomError
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.memory_fit import fit_memory
from boxmaker.loopd.memory_port import MemoryPort, MemoryUnavailableError
from boxmaker.loopd.model import (
    ContextFullError,
    Interrupted,
    Model,
    ModelUnavailableError,
    never,
)
from boxmaker.loopd.prompting import Prompter
from boxmaker.loopd.replying import Replier
from boxmaker.loopd.session_log import (
    MemoryEntry,
    ModelEntry,
    NoticeEntry,
    SessionLog,
    SessionLogs,
    UserEntry,
    logged_calls,
)
from boxmaker.loopd.tool_runs import ToolRunner
from boxmaker.loopd.tools import SCHEMAS

log = logging.getLogger(__name__)

STOPPED = "The turn was stopped: what the model had written is kept in the session."


class TurnRefusedError(BoxmakerError):
    """The turn cannot start; the text says why in one line, `code` is the wire's."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MALFORMED) -> None:
        super().__init__(message)
        self.code = code


class TurnLoop:
    def __init__(
        self,
        model: Model,
        dialect: Dialect,
        logs: SessionLogs,
        port: BrokerPort | None,
        limits: TurnLimits,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        markers: Sequence[str] = (),
        memory: MemoryPort | None = None,
    ) -> None:
        self._model = model
        self._dialect = dialect
        self._logs = logs
        self._memory = memory
        self._limits = limits
        self._prompter = Prompter(model, dialect, markers)
        self._replier = Replier(model, dialect, limits)
        self._tools = ToolRunner(self._prompter, port, limits.result_tokens, clock)
        self._compactor = Compactor(model, self._prompter, self._replier, self._tools, limits)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}  # the running turns' (issue 42)

    @property
    def logs(self) -> SessionLogs:
        """The session logs this loop reads and appends to."""
        return self._logs

    def _lock(self, session: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(session, threading.Lock())

    def prompt(self, session_log: SessionLog) -> list[int]:
        """The token ids of the next prompt for this session, rendered from its log."""
        return self._prompter.prompt(session_log)

    def cancel(self, session: str) -> bool:
        """Stop `session`'s running turn at its next token (`cancel` on loop.sock): True
        when one was running."""
        with self._locks_guard:
            cancelled = self._cancels.get(session)
        if cancelled is None:
            return False
        cancelled.set()
        return True

    def run(
        self,
        session: str,
        text: str,
        resume: bool,
        emit: Callable[[Event], None],
        interrupted: Interrupted = never,
    ) -> TurnDone:
        """One turn; stopped at the next token by `cancel`, or when `interrupted()` (its
        client gone): the reply so far is logged as interrupted, a tool call at brokerd
        finishes and its result is logged, and no other call is made."""
        cancelled = threading.Event()
        with self._lock(session):
            with self._locks_guard:
                self._cancels[session] = cancelled
            try:
                return self._run(
                    session, text, resume, emit, lambda: cancelled.is_set() or interrupted()
                )
            finally:
                with self._locks_guard:
                    self._cancels.pop(session, None)

    def _run(
        self,
        session: str,
        text: str,
        resume: bool,
        emit: Callable[[Event], None],
        interrupted: Interrupted,
    ) -> TurnDone:
        session_log = self._logs.open(session)
        if session_log.entries and not resume:
            raise TurnRefusedError(
                f"session {session} already exists; resume it or choose another id"
            )
        if resume and not session_log.entries:
            raise TurnRefusedError(f"session {session} has no log to resume")
        if not resume:
            self._remember(session, session_log)
        session_log.append(UserEntry(text=self._prompter.neutralised(session, "user", text)))
        final = self._loop(session, session_log, emit, interrupted)
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
            self._prompter.count,
            self._prompter.tags,
        )
        if block.strip():
            session_log.append(
                MemoryEntry(text=self._prompter.neutralised(session, "memory", block))
            )

    def _loop(
        self,
        session: str,
        session_log: SessionLog,
        emit: Callable[[Event], None],
        interrupted: Interrupted,
    ) -> str:
        calls = 0
        generated = 0
        while True:
            if interrupted():
                return self._stopped_between(session, session_log)
            budget = min(self._limits.reply_tokens, self._limits.max_tokens - generated)
            if budget <= 0:
                return f"The turn stopped: it used its {self._limits.max_tokens} tokens."
            prompt = self._prompt_or_refuse(session_log)
            if self._compactor.over(prompt):
                try:
                    self._compactor.compact(session, session_log, emit, len(prompt))
                except NoRoomError as exc:
                    return str(exc)
                prompt = self._prompt_or_refuse(session_log)
            try:
                last = budget == self._limits.max_tokens - generated
                generation = self._replier.reply(
                    session, prompt, budget, last, emit, interrupted=interrupted
                )
            except ContextFullError:
                return (
                    f"The turn stopped: the conversation fills the model's context "
                    f"({len(prompt)} tokens); {Runbook.LOOPD_CONTEXT_FULL.pointer}."
                )
            except ModelUnavailableError as exc:  # nothing of the reply is logged
                log.warning("event=model_unavailable session=%s %s", session, exc)
                return f"The turn stopped: {exc}."
            if generation.interrupted and not generation.ids:
                return self._stopped_between(session, session_log)  # in the prompt's eval
            generated += len(generation.ids)
            emit(
                UsageEvent(
                    prompt=len(prompt),
                    generated=len(generation.ids),
                    context=self._limits.context,
                    seconds=generation.seconds,
                )
            )
            if generation.interrupted:
                session_log.append(
                    ModelEntry(
                        text=generation.text,
                        ids=generation.ids,
                        prompt=len(prompt),
                        interrupted=True,
                    )
                )
                session_log.append(NoticeEntry(text=INTERRUPTED))
                log.info("event=turn_stopped session=%s tokens=%d", session, len(generation.ids))
                return STOPPED
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
                if interrupted():  # the call at brokerd finished; no other is made
                    return self._stopped_between(session, session_log)
                if calls >= self._limits.max_tool_calls:
                    return (
                        f"The turn stopped: the model asked for more than "
                        f"{self._limits.max_tool_calls} tool calls."
                    )
                calls += 1
                self._tools.run(
                    session, session_log, call, emit, answers=made.id, interrupted=interrupted
                )

    def _stopped_between(self, session: str, session_log: SessionLog) -> str:
        """Stopped between two steps (after a result, or before the first reply): the
        model is told so in its next prompt."""
        session_log.append(NoticeEntry(text=STOPPED_BETWEEN))
        log.info("event=turn_stopped session=%s between=true", session)
        return STOPPED

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
                done = self._compactor.compact(session, session_log, emit, before)
            except NoRoomError as exc:
                content = str(exc)
            else:
                content = (
                    f"Compacted: {done.before} tokens became {done.after}."
                    if done is not None
                    else "Nothing to compact: the owner's last turns are kept as they are."
                )
            return TurnDone(session=session, content=content, untrusted=session_log.untrusted)
