"""The bottom of a terminal redrawn in place, everything above it written for good.

I/O: one text stream that is a terminal (`bxctl chat`'s standard error).

A frame is one write: the live lines drawn last are erased (carriage return, cursor
up, erase to the end of the screen), the lines that are done are written for good,
then the new live lines, the cursor left at the end of the last. Every line is cut
to the terminal's width less one cell, so none wraps and the count of lines to erase
is the count drawn. One write a frame keeps a Ctrl-C from landing inside an escape
sequence of ours. The lines are ours or already escaped (`console_markdown`); styles
are added here only as SGR.
"""

from __future__ import annotations

import os
from typing import TextIO

from rich.cells import cell_len, set_cell_size

DIM = "\x1b[2m"
REVERSE = "\x1b[7m"
RESET = "\x1b[0m"
ERASE_DOWN = "\x1b[J"


def fit(line: str, width: int) -> str:
    """A line without escape sequences, cut to `width` cells (an ellipsis marks a cut)."""
    if cell_len(line) <= width:
        return line
    return set_cell_size(line, max(0, width - 1)) + "…"


def styled(line: str, style: str) -> str:
    return f"{style}{line}{RESET}"


class Screen:
    """The live lines at the bottom of a terminal, and the lines written above them."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._live = 0  # how many lines the last frame drew at the bottom

    def size(self) -> tuple[int, int]:
        """Columns and rows, less one column (no line may reach the last)."""
        try:
            columns, rows = os.get_terminal_size(self._out.fileno())
        except (OSError, ValueError):
            columns, rows = 80, 24
        return max(columns - 1, 1), max(rows, 3)

    def _erase(self) -> str:
        if self._live == 0:
            return ""
        up = f"\x1b[{self._live - 1}A" if self._live > 1 else ""
        return f"\r{up}{ERASE_DOWN}"

    def frame(self, done: list[str], live: list[str]) -> None:
        """Write `done` above for good and show `live` at the bottom, in one write."""
        text = self._erase() + "".join(line + "\n" for line in done) + "\n".join(live)
        self._live = len(live)
        self._out.write(text)
        self._out.flush()

    def clear(self) -> None:
        """Erase the live lines: the next writer starts on a line of its own."""
        self.frame([], [])
