"""A program in a tmux pane, for tests of what the owner sees in a real terminal.

I/O: a tmux server of the test's own (its socket in a fresh directory under /tmp,
short enough for a socket's path, no configuration file read), one session whose
one pane runs the program; keys and pastes sent to it; the pane's screen captured,
with or without the escape sequences of its colours and styles.

The pane stays when the program ends (`remain-on-exit`), so its last screen and its
exit status can be read. `close` ends the server and removes the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from signal import SIGCHLD

SESSION = "chat"


def tmux_available() -> bool:
    return shutil.which("tmux") is not None


class TmuxPane:
    """One program on a `width` x `height` tmux pane (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        width: int = 100,
        height: int = 32,
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="bx-tmux-", dir="/tmp"))
        self.socket = self._dir / "s"
        environment = [f"{name}={value}" for name, value in env.items()]
        self._tmux(
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            str(width),
            "-y",
            str(height),
            "--",
            "env",
            "-i",
            *environment,
            *command,
        )
        self._tmux("set-option", "-t", SESSION, "remain-on-exit", "on")

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def keys(self, *keys: str) -> None:
        """Keys by tmux's names (`Enter`, `C-c`, `Escape`, `Up`, `Tab`)."""
        self._tmux("send-keys", "-t", SESSION, *keys)

    def type(self, text: str) -> None:
        """`text` typed as it is, key by key."""
        self._tmux("send-keys", "-t", SESSION, "-l", text)

    def paste(self, text: str) -> None:
        """`text` pasted, in the terminal's bracketed paste where the program asked for it."""
        self._tmux("set-buffer", "-b", "test", "--", text)
        self._tmux("paste-buffer", "-p", "-d", "-b", "test", "-t", SESSION)

    def screen(self, escapes: bool = False) -> str:
        """The visible screen, its lines' trailing blanks removed; `escapes`: with the
        sequences of colours and styles as tmux keeps them."""
        args = ["capture-pane", "-p", "-t", SESSION] + (["-e"] if escapes else [])
        return self._tmux(*args)

    def format(self, spec: str) -> str:
        """A tmux format of the pane (`#{pane_title}`, `#{pane_dead_status}`)."""
        return self._tmux("display-message", "-p", "-t", SESSION, spec).rstrip("\n")

    def buffers(self) -> str:
        """tmux's paste buffers (where an OSC 52 the pane obeyed would land)."""
        return self._tmux("list-buffers", "-F", "#{buffer_name}: #{buffer_sample}")

    def wait_for(
        self,
        found: str | Callable[[str], bool],
        timeout_s: float = 15.0,
        escapes: bool = False,
    ) -> str:
        """The screen once it shows `found` (a text, or a test of the screen)."""
        test = found if callable(found) else (lambda screen: found in screen)
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen(escapes)
            if test(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"not on the screen after {timeout_s} s: {found!r}\n{screen}")
            time.sleep(0.05)

    def exit_status(self, timeout_s: float = 10.0) -> int:
        """The program's exit status once it has ended, as subprocess gives it: minus the
        signal's number when a signal ended it.

        tmux marks the pane dead when the program's terminal closes, before it has
        reaped the program (tmux/tmux#4841): until then the pane has neither a status
        nor a signal, so both are waited for. And Debian's tmux 3.3a, linked with
        libutempter, can miss the program's SIGCHLD altogether and leave it a zombie it
        never reaps (1 chat in 6 here, and in CI; tmux/tmux#311 is the same loss, put
        down to libutempter's own SIGCHLD handler there); a SIGCHLD sent to the server,
        the workaround its maintainer gives there, makes it reap."""
        deadline = time.monotonic() + timeout_s
        while True:
            dead, status, signal, server = self.format(
                "#{pane_dead}|#{pane_dead_status}|#{pane_dead_signal}|#{pid}"
            ).split("|")
            if dead == "1" and (status or signal):
                return int(status) if status else -int(signal)
            if dead == "1":
                os.kill(int(server), SIGCHLD)  # a harmless waitpid(WNOHANG) to tmux
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout_s} s\n{self.screen()}")
            time.sleep(0.05)

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, check=False
        )
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TmuxPane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
