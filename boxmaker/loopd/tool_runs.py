"""One tool call of a turn, run and logged: loopd's own tools (clock, find_tool), the
rest through brokerd, and the result appended to the session log, neutralised, before
the model or anyone sees it.

I/O: the broker port (through its seam), the session log, events through `emit`.

A call brokerd must decide reaches it as `call_tool`'s inner call or, when the model
named a tool of the table directly, as that call: brokerd decides all the same. A wait
for the owner is an `approval_pending` event, a denial a `tool_denied` event and the
deny reason's model text (`loopd.tools.denial_text`). A result over its budget in the
prompt is cut for the model (`core.model.result_cut`) and the log keeps both, so the
prompt is rendered again the same.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from boxmaker.core.grants.tools import TOOLS
from boxmaker.core.labels import DataClass
from boxmaker.core.model.result_cut import cut_result
from boxmaker.core.model.tool_calls import BadToolCall, ToolCall
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    Event,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolResultEvent,
)
from boxmaker.loopd.broker_port import NOT_CONFIGURED, BrokerPort
from boxmaker.loopd.model import Interrupted, never
from boxmaker.loopd.prompting import Prompter
from boxmaker.loopd.session_log import SessionLog, ToolEntry
from boxmaker.loopd.tools import denial_text, find_tools

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    class_: DataClass = DataClass.PUBLIC
    untrusted: bool = False
    truncated: bool = False


def called(call: ToolCall) -> str:
    """The tool a call runs: call_tool's inner name, else the call's own."""
    if call.name != "call_tool":
        return call.name
    try:
        inner = json.loads(call.arguments).get("name")
    except (ValueError, AttributeError):
        return call.name
    return inner if isinstance(inner, str) else call.name


class ToolRunner:
    def __init__(
        self,
        prompter: Prompter,
        port: BrokerPort | None,
        result_tokens: int | None,
        clock: Callable[[], datetime],
    ) -> None:
        self._prompter = prompter
        self._port = port
        self._result_tokens = result_tokens
        self._clock = clock

    def run(
        self,
        session: str,
        session_log: SessionLog,
        call: ToolCall | BadToolCall,
        emit: Callable[[Event], None],
        only: frozenset[str] | None = None,
        answers: str | None = None,
        interrupted: Interrupted = never,
    ) -> None:
        """Run one call and log its result, with `answers`, the id of the model's call it
        answers; with `only`, a call to any other tool is not run (its result says so);
        a call waiting for the owner is withdrawn when `interrupted()` (`BrokerPort`)."""
        call_id = f"c{uuid.uuid4().hex[:20]}"
        name = call.name if isinstance(call, ToolCall) else "unreadable"
        arguments = call.arguments if isinstance(call, ToolCall) else "{}"
        emit(ToolCallStartedEvent(call=call_id, name=name, arguments=arguments))
        if isinstance(call, BadToolCall):
            outcome = ToolOutcome(f"The tool call could not be read: {call.problem}")
        elif only is not None and called(call) not in only:
            outcome = ToolOutcome(f"Not run: only these tools run now: {', '.join(sorted(only))}.")
        else:
            outcome = self._outcome(session, call_id, call, emit, interrupted)
        content = self._prompter.neutralised(session, "tool", outcome.content)
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

    def _sized(self, content: str) -> str | None:
        """What the model is shown of a tool result over its budget (`core.model.result_cut`:
        head, a marker, tail; cut after neutralising, never inside a tag); None when it
        fits as it is. The log keeps both, so the prompt is rendered again the same."""
        if self._result_tokens is None:
            return None
        cut = cut_result(content, self._result_tokens, self._prompter.count, self._prompter.tags)
        return cut.text if cut.cut else None

    def _outcome(
        self,
        session: str,
        call_id: str,
        call: ToolCall,
        emit: Callable[[Event], None],
        interrupted: Interrupted,
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
            inner_arguments = json.dumps(inner, ensure_ascii=False)
            return self._broker(session, call_id, tool, inner_arguments, emit, interrupted)
        if call.name in TOOLS:  # called directly: brokerd decides all the same
            return self._broker(session, call_id, call.name, call.arguments, emit, interrupted)
        return ToolOutcome(
            f"There is no tool named {call.name!r}. Use find_tool to see the tools, "
            "then call_tool to run one."
        )

    def _broker(
        self,
        session: str,
        call_id: str,
        tool: str,
        arguments: str,
        emit: Callable[[Event], None],
        interrupted: Interrupted,
    ) -> ToolOutcome:
        if self._port is None:
            return ToolOutcome(f"Failed: {NOT_CONFIGURED}.")
        request = ToolRequest(session=session, call=call_id, tool=tool, arguments=arguments)

        def pending(frame: PendingApprovalResponse) -> None:
            emit(ApprovalPendingEvent(approval=frame.approval, tool=tool, expires=frame.expires))

        response = self._port.call(request, pending, interrupted)
        if isinstance(response, ResultResponse):
            return ToolOutcome(
                response.content, response.class_, response.untrusted, response.truncated
            )
        if isinstance(response, DeniedResponse):
            emit(ToolDeniedEvent(name=tool, reason=response.reason))
            return ToolOutcome(denial_text(response.reason, response.detail))
        assert isinstance(response, FailedResponse)
        return ToolOutcome(f"Failed: {response.message}.")
