"""A turn on the owner's terminal: reasoning folded, the reply rendered, a status line.

I/O: a `Screen` (standard error, a terminal) and, for the answer when it goes
elsewhere, standard output.

While the turn runs, the bottom of the screen is live:
    - reasoning: a dim header (`thinking 12s, 34 lines`) and its last `FOLD` lines,
      dim; when it ends, one dim line stays (`thought 12s, 34 lines; Ctrl-T at the
      prompt shows them`), and all of it is kept for that key;
    - the reply: its markdown rendered (`console_markdown`) as it streams; the lines
      above the last `TAIL` are written for good as they come (a later token rarely
      changes them: a table's or a setext heading's first lines can be shown as
      plain text), the rest redrawn with each frame;
    - the status line (`core.display.status_line`), last, in reverse video.
Tool calls, results, denials and compactions are written for good as the plain
chat writes them (`chat_lines`). An approval erases the live lines first: the block
and the question that follow are brokerd's and the owner's, on lines of their own.

Frames come at most every `FRAME_S` while text streams; other events draw at once.
Between events a ticker thread redraws the status line every `TICK_S` (its
`working 12s` counts up while a long prompt is read or a tool runs), except while an
approval is asked: the question is the last line until the next event. Drawing is
under one lock, and one frame is one write (`console_screen`).
The answer: when standard output is this terminal too, the reply is shown once, as
the plain chat decides it (`chat_lines.unshown_rest`): the streamed run completed
with the answer's rest, rendered; otherwise the answer, rendered, after the run.
When standard output goes elsewhere, the answer goes there as the plain chat writes
it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TextIO

from rich.cells import chop_cells

from boxmaker.bxctl.chat_lines import event_lines, unshown_rest
from boxmaker.bxctl.console_markdown import render_markdown
from boxmaker.bxctl.console_screen import DIM, REVERSE, Screen, fit, styled
from boxmaker.core.display.escape import escape_model_text
from boxmaker.core.display.status_line import Standing, rate_of, status_line
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    ContentEvent,
    Event,
    ReasoningEvent,
    ToolResultEvent,
    TurnDone,
    UsageEvent,
)

FOLD = 3  # reasoning lines shown while it streams
TAIL = 6  # rendered reply lines kept live
FRAME_S = 0.08
TICK_S = 1.0
SHOW_REASONING_KEY = "Ctrl-T"


def wrap_plain(text: str, width: int) -> list[str]:
    """`text` escaped and cut into lines of at most `width` cells."""
    lines: list[str] = []
    for line in escape_model_text(text).expandtabs(4).split("\n"):
        lines += chop_cells(line, width) if line else [""]
    return lines


def _span(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _count(lines: int) -> str:
    return f"{lines} line" + ("" if lines == 1 else "s")


class ConsoleView:
    """Events of one turn after another, drawn on a `Screen` (see the module docstring)."""

    def __init__(
        self,
        screen: Screen,
        standing: Standing,
        color_system: str | None,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float | None = TICK_S,
    ) -> None:
        self.screen = screen
        self.standing = standing
        self.last_reasoning = ""  # the last turn's reasoning, all of it
        # asked to bring `standing` up to date when a result or a waiting call may change it
        self.on_standing_change: Callable[[], None] | None = None
        self._colors = color_system
        self._clock = clock
        self._started: float | None = None  # the running turn's start
        self._reasoning: list[str] | None = None  # the open reasoning block
        self._reasoning_started = 0.0
        self._content: list[str] | None = None  # the open run of content
        self._written = 0  # rendered lines of the open run written for good
        self._drawn = 0.0
        self._lock = threading.RLock()
        self._tick_s = tick_s
        self._paused = False  # an approval is being asked: no redraw until the next event
        self._ticking = threading.Event()  # set: the running turn's ticker stops

    # the turn

    def begin(self) -> None:
        """A turn starts; the screen is drawn at its first event or tick (an error
        sooner is a line of its own)."""
        with self._lock:
            self._started = self._clock()
            self.last_reasoning = ""
            self._paused = False
            self._ticking = threading.Event()
        if self._tick_s is not None:
            ticker = threading.Thread(
                target=self._tick, args=(self._ticking, self._tick_s), daemon=True
            )
            ticker.start()

    def _tick(self, stop: threading.Event, every: float) -> None:
        while not stop.wait(every):
            with self._lock:
                if stop.is_set():
                    return
                if not self._paused and self._clock() - self._drawn >= every:
                    self._draw([], force=True)

    def _end_turn(self) -> None:
        self._started = None
        self._ticking.set()

    @property
    def shown(self) -> str | None:
        return None if self._content is None else "".join(self._content)

    def event(self, out: TextIO, event: Event) -> None:
        del out  # the screen is where everything goes
        with self._lock:
            self._paused = False
            self._event(event)

    def _event(self, event: Event) -> None:
        match event:
            case ReasoningEvent(text=text):
                if self._reasoning is None:
                    self._reasoning = []
                    self._reasoning_started = self._clock()
                self._reasoning.append(text)
                self._draw([])
            case ContentEvent(text=text):
                done = self._fold_reasoning()
                if self._content is None:
                    self._content, self._written = [], 0
                self._content.append(text)
                self._draw(done, force=bool(done))
            case UsageEvent():
                self.standing = replace(
                    self.standing,
                    used=event.prompt + event.generated,
                    context=event.context,
                    rate=rate_of(event.generated, event.seconds) or self.standing.rate,
                )
                self._draw([], force=True)
            case ApprovalPendingEvent():
                self._standing_may_change()
                done = self._fold_reasoning() + self._end_content(None)
                self._paused = True
                self.screen.frame(done, [])  # brokerd's block and the question follow
            case _:
                if isinstance(event, ToolResultEvent):
                    self._standing_may_change()
                done = self._fold_reasoning() + self._end_content(None)
                self._draw(done + event_lines(event), force=True)

    def end_reasoning(self, out: TextIO) -> None:
        del out
        with self._lock:
            done = self._fold_reasoning()
            if done:
                self._draw(done, force=True)

    def end_blocks(self, out: TextIO) -> None:
        """The turn ended without an answer (an error, a Ctrl-C): keep what was shown."""
        del out
        with self._lock:
            self._end_turn()
            done = self._fold_reasoning() + self._end_content(None)
            self.screen.frame(done, [])

    def answer(self, done: TurnDone, once: bool, out: TextIO, answer_out: TextIO) -> None:
        """The turn's answer (see the module docstring); the live lines end."""
        del out
        with self._lock:
            self._end_turn()
            shown = self.shown
            rest = unshown_rest(shown, done.content) if once else None
            lines = self._fold_reasoning()
            if rest is not None:  # the run, completed with what it had not shown
                lines += self._end_content((shown or "") + rest)
            else:
                lines += self._end_content(None)
                if once:
                    lines += self._render(done.content)
            self.screen.frame(lines, [])
        if not once:
            answer_out.write(escape_model_text(done.content) + "\n")
            answer_out.flush()

    # drawing

    def _standing_may_change(self) -> None:
        if self.on_standing_change is not None:
            self.on_standing_change()

    def _render(self, text: str) -> list[str]:
        width, _ = self.screen.size()
        return render_markdown(text, width, self._colors)

    def _fold_reasoning(self) -> list[str]:
        """Close the open reasoning block: its one dim line, kept for good."""
        if self._reasoning is None:
            return []
        text = "".join(self._reasoning).strip("\n")
        self.last_reasoning = text
        self._reasoning = None
        if not text.strip():
            return []
        took = _span(self._clock() - self._reasoning_started)
        count = _count(text.count("\n") + 1)
        line = f"thought {took}, {count}; {SHOW_REASONING_KEY} at the prompt shows them"
        return [styled(fit(line, self.screen.size()[0]), DIM)]

    def _end_content(self, final: str | None) -> list[str]:
        """Close the open run: its lines not yet written, rendered from `final` (the run's
        own text when None)."""
        if self._content is None:
            return []
        text = "".join(self._content) if final is None else final
        lines = self._render(text)[self._written :] if text.strip() else []
        self._content = None
        return lines

    def _draw(self, done: list[str], force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._drawn < FRAME_S:
            return
        self._drawn = now
        width, rows = self.screen.size()
        live: list[str] = []
        if self._reasoning is not None:
            took = _span(now - self._reasoning_started)
            wrapped = wrap_plain("".join(self._reasoning).strip("\n"), width)
            live.append(styled(fit(f"thinking {took}, {_count(len(wrapped))}", width), DIM))
            live += [styled(line, DIM) for line in wrapped[-FOLD:]]
        if self._content is not None:
            rendered = self._render("".join(self._content))
            keep = max(1, min(TAIL, rows - len(live) - 2))
            settled = max(self._written, len(rendered) - keep)
            done = done + rendered[self._written : settled]
            self._written = settled
            live += rendered[settled:]
        working = None if self._started is None else now - self._started
        line = status_line(replace(self.standing, working_s=working))
        live.append(styled(fit(line, width), REVERSE))
        self.screen.frame(done, live)
