"""The plain chat's view of a turn: events as lines, the reply as it streams, the answer.

I/O: the streams it is given (standard error for events, standard output for the
answer).

The reply shows once. Content events are the reply as it streams (one event, or
many as the tokens arrive): their texts are written to standard error one after
another, as one run that the next other event, or the end of the turn, ends with a
newline. The answer (`turn_done`'s content, which is exact) goes to standard output.
To two places (two pipes, a file and a terminal), that is all: both streams carry
the reply, so a script reading standard output gets the answer whatever the events
were. When standard output and standard error are one place that one reader reads
(one terminal, or one file or pipe, `scripts/run > log 2>&1`: equal `st_dev`,
`st_rdev` and `st_ino`), the reader would read the reply twice, so the answer is not
repeated:
    - the run of content events that ends the turn is compared with the answer,
      ignoring whitespace before both and, when the run holds all of it, after both;
    - when the run showed the answer or its beginning, standard output gets only
      what the run has not shown, then the newline (none when the run showed all
      and already ended with one): the answer completes the line;
    - otherwise (no content event, or a run that differs from the answer, such as a
      turn stopped at its token limit), the run ends with its newline and the whole
      answer is printed, as when piped: the answer is never lost to save a repeat.
`--json` prints events and the answer in different forms; it is never shortened.
"""

from __future__ import annotations

import os
from typing import IO, TextIO

import orjson

from boxmaker.bxctl.chat_lines import event_lines, unshown_rest
from boxmaker.core.display.escape import escape_arguments, escape_model_text
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    ContentEvent,
    Event,
    ReasoningEvent,
    TurnDone,
    UsageEvent,
)

RESET = "\x1b[0m"
DIM = "\x1b[2m"


class Printer:
    """Writes events for a person: everything the model chose is escaped as data.

    Content events are written as one run (see the module docstring); `shown` is
    the run's text as the model wrote it, for the answer to be compared with.
    """

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self._dimmed = False
        self._content: list[str] | None = None  # the open run of content events

    def event(self, out: TextIO, event: Event) -> None:
        if self.json_mode:
            line = orjson.dumps(event.model_dump(mode="json", by_alias=True)).decode()
            out.write(escape_arguments(line) + "\n")  # the same JSON, nothing hidden
            return
        if isinstance(event, UsageEvent):
            return  # for the console's status line; a plain run shows the reply alone
        if not isinstance(event, ContentEvent):
            self.end_content(out)
        match event:
            case ReasoningEvent(text=text):
                if not self._dimmed:
                    out.write(DIM)
                    self._dimmed = True
                out.write(escape_model_text(text))
            case ContentEvent(text=text):
                self.end_reasoning(out)
                if self._content is None:
                    self._content = []
                self._content.append(text)
                out.write(escape_model_text(text))
            case ApprovalPendingEvent():
                self.end_reasoning(out)
            case _:
                lines = event_lines(event)
                if lines:
                    self.end_reasoning(out)
                out.write("".join(line + "\n" for line in lines))

    @property
    def shown(self) -> str | None:
        """The open content run's text, unescaped; None when no run is open."""
        return None if self._content is None else "".join(self._content)

    def end_reasoning(self, out: TextIO) -> None:
        if self._dimmed:
            out.write(RESET + "\n")
            self._dimmed = False

    def end_content(self, out: TextIO) -> None:
        """End the open content run with its newline."""
        if self._content is not None:
            out.write("\n")
            self._content = None

    def hand_over_content(self) -> None:
        """Close the open content run without its newline: the answer ends the line."""
        self._content = None

    def end_blocks(self, out: TextIO) -> None:
        self.end_content(out)
        self.end_reasoning(out)

    def answer(self, done: TurnDone, once: bool, out: TextIO, answer_out: TextIO) -> None:
        """The answer on `answer_out`; with `once`, only what the streamed run has not shown."""
        if self.json_mode:
            line = orjson.dumps(done.model_dump(mode="json")).decode()
            answer_out.write(escape_arguments(line) + "\n")
            answer_out.flush()
            return
        shown = self.shown
        rest = unshown_rest(shown, done.content) if once else None
        if rest is None:
            self.end_content(out)
            rest = done.content
            end = "\n"
        else:
            self.hand_over_content()
            end = "" if not rest and (shown or "").endswith("\n") else "\n"  # a line ends once
        out.flush()  # what the events wrote comes first
        answer_out.write(escape_model_text(rest) + end)
        answer_out.flush()


def same_output(first: IO[str], second: IO[str]) -> bool:
    """Whether both streams write to one place that one reader reads: one terminal,
    one file or one pipe (equal device and inode, and for a tty its device number)."""
    try:
        a, b = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (OSError, ValueError):  # not a file (a test's capture), or closed
        return False
    return (a.st_dev, a.st_rdev, a.st_ino) == (b.st_dev, b.st_rdev, b.st_ino)
