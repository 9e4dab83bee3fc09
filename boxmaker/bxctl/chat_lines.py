"""The lines `bxctl chat` shows for the events that are not streamed text, and what of
an answer the streamed reply has not shown. No I/O.

Everything the model chose (a tool's name as it called it, the arguments) is escaped
as data; the rest (sizes, classes, deny reasons, the runbook pointer) is ours.
"""

from __future__ import annotations

from boxmaker.core.display.escape import escape_arguments, escape_model_text
from boxmaker.core.model.compaction_plan import compacted_line
from boxmaker.core.wire.loop import (
    ContextCompactedEvent,
    Event,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolResultEvent,
)


def event_lines(event: Event) -> list[str]:
    """The lines `event` is shown as; none for streamed text, waits and figures."""
    match event:
        case ToolCallStartedEvent(name=name, arguments=arguments):
            return [f"[tool {escape_model_text(name)} {escape_arguments(arguments)}]"]
        case ToolResultEvent(name=name, content=content, truncated=truncated):
            flags = [event.class_.value] + (["untrusted"] if event.untrusted else [])
            flags += ["truncated"] if truncated else []
            size = len(content.encode())
            return [f"[result {escape_model_text(name)}: {size} bytes, {', '.join(flags)}]"]
        case ToolDeniedEvent(name=name, reason=reason):
            lines = [f"[denied {escape_model_text(name)}: {reason}]"]
            if reason.runbook is not None:
                lines.append(reason.runbook.pointer)
            return lines
        case ContextCompactedEvent(before=before, after=after):
            return [compacted_line(before, after)]
        case _:
            return []


def unshown_rest(shown: str | None, answer: str) -> str | None:
    """What of `answer` the content run `shown` has not shown; None when it showed else.

    Whitespace before both is ignored (the run may open with what the answer
    drops), and so is whitespace after both when the run holds all of the answer.
    """
    if shown is None or not shown.strip():
        return None
    head, body = shown.lstrip(), answer.lstrip()
    if body.startswith(head):
        return body[len(head) :]
    if head.rstrip() == body.rstrip():
        return ""
    return None
