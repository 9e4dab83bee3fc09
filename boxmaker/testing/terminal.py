"""A process on a pseudo-terminal, for tests of what a person at a terminal sees.

I/O: a pty pair and a child process whose standard input, output and error are the
pty's one slave end (so all three are the same terminal), or only those the caller
does not replace. The child leads a session of its own whose controlling terminal the
pty is, as a shell's foreground job's, so a typed Ctrl-C ("\x03") is its SIGINT.
What the child writes is read from the master end with deadlines;
the terminal's own line discipline turns each "\\n" written into "\\r\\n".
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

from boxmaker.testing.processes import clean_environment


def _take_terminal() -> None:
    """In the child, after its setsid: standard input's terminal becomes its own, and
    Ctrl-C its default again, as a shell starts a foreground job (a test run in the
    background of a shell without job control inherits SIGINT ignored, and a Python
    started so never raises KeyboardInterrupt)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """A process on a pseudo-terminal: what it writes is read with deadlines."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        stdout: int | None = None,
        stderr: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start `args` on a new terminal; `stdout` or `stderr` (a descriptor) replaces it."""
        self.master, slave = os.openpty()
        try:
            self.process = subprocess.Popen(
                list(args),
                stdin=slave,
                stdout=slave if stdout is None else stdout,
                stderr=slave if stderr is None else stderr,
                env=clean_environment({"TERM": "dumb", **(env or {})}),
                start_new_session=True,
                preexec_fn=_take_terminal,
            )
        finally:
            os.close(slave)
        self.seen = ""
        self.everything = ""  # all the terminal has shown, never consumed by `expect`

    def _read(self, left: float) -> bool:
        """Read what is there within `left` seconds; False once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], max(left, 0.0))
        if not ready:
            return True
        try:
            data = os.read(self.master, 4096)
        except OSError:  # EIO: the process has closed the terminal
            data = b""
        if not data:
            return False
        text = data.decode("utf-8", "replace")
        self.seen += text
        self.everything += text
        return True

    def expect(self, text: str, timeout_s: float = 30.0) -> None:
        """Read until `text` has been written (after what was expected before)."""
        deadline = time.monotonic() + timeout_s
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"never saw {text!r}; the terminal shows:\n{self.seen}")
            if not self._read(left):
                raise EOFError(f"the terminal closed before {text!r}:\n{self.seen}")
        self.seen = self.seen[self.seen.index(text) + len(text) :]

    def read_to_end(self, timeout_s: float = 30.0) -> str:
        """Read until the process has closed the terminal; all it has shown."""
        deadline = time.monotonic() + timeout_s
        while self._read(deadline - time.monotonic()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the terminal is still open; it shows:\n{self.everything}")
        return self.everything

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        if self.process.poll() is None:
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self.master)
        return self.process.returncode

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
