"""The owner's line on a terminal: prompt_toolkit's editing, history, paste and keys.

I/O: the terminal (prompt_toolkit reads it raw while a line is typed, and gives it
back cooked between lines, so a Ctrl-C during a turn is a SIGINT as in the plain
chat); the history file.

    - Line editing, and the `/` commands (`chat_commands.COMMANDS`) completed at the
      line's start.
    - History across sessions in `history_path()`: the owner's state directory, the
      directory 0700 and the file 0600 (made so, or narrowed to it, before it is read).
      Approval answers are not kept: they are asked in the plain way, not here.
    - Enter sends. Esc then Enter (or Alt-Enter) starts a new line; a paste (the
      terminal's bracketed paste) is held as it is, new lines and all, so a pasted
      block of code is one message.
    - Ctrl-C raises KeyboardInterrupt, Ctrl-D on an empty line EOFError: the caller
      says what each means. `SHOW_REASONING_KEY` (Ctrl-T) calls `show_reasoning`
      above the prompt.
    - The status line is prompt_toolkit's bottom toolbar while the owner types.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from boxmaker.bxctl.chat_commands import COMMANDS

HISTORY_NAME = "chat-history"


def history_path() -> Path:
    """`$XDG_STATE_HOME/boxmaker/chat-history`, else under `~/.local/state`."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "boxmaker" / HISTORY_NAME


def private_file(path: Path) -> Path:
    """`path` made (or narrowed) to the owner's alone: its directory 0700, itself 0600.

    Raises OSError when that cannot be done (the caller goes on without history)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.parent.stat().st_mode) & 0o077:
        path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path


class SlashCompleter(Completer):
    """The `/` commands, completed while the line is one word that starts with `/`."""

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        del complete_event
        typed = document.text_before_cursor
        if not typed.startswith("/") or any(c.isspace() for c in typed):
            return
        for name, meaning in COMMANDS.items():
            if name.startswith(typed):
                yield Completion(name, start_position=-len(typed), display_meta=meaning)


def _bindings(show_reasoning: Callable[[], None]) -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _new_line(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-t")
    def _reasoning(event: KeyPressEvent) -> None:
        del event
        run_in_terminal(show_reasoning)

    return keys


class ConsoleInput:
    """Reads the owner's messages (see the module docstring)."""

    def __init__(
        self,
        history: Path | None,
        toolbar: Callable[[], str],
        show_reasoning: Callable[[], None],
    ) -> None:
        self._session: PromptSession[str] = PromptSession(
            history=FileHistory(history) if history is not None else None,
            completer=SlashCompleter(),
            complete_while_typing=True,
            key_bindings=_bindings(show_reasoning),
            bottom_toolbar=toolbar,
            prompt_continuation=lambda width, line, soft: ". ".rjust(width),
            enable_suspend=False,
        )

    def read(self) -> str:
        """One message as typed or pasted; KeyboardInterrupt, EOFError as the keys say."""
        return self._session.prompt("> ")
