"""The real console scripts as child processes, for tests that run them.

I/O: child processes, a pipe read by a thread, signals. No role imports this module.

    console_script      the command of a console script of the running environment
    clean_environment   this environment without any BOXMAKER_* variable
    DaemonProcess       `<role> serve --config` as a child process (brokerd by
                        default), waited for until its sockets accept, stopped
                        with SIGTERM

Nothing here sleeps to wait: `wait_until` polls a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from boxmaker.testing.sockets import accepts
from boxmaker.testing.waiting import wait_until


def console_script(name: str) -> list[str]:
    """The command for console script `name` of the running environment."""
    script = Path(sys.executable).parent / name
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", f"boxmaker.{name}.main"]


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without any BOXMAKER_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


class DaemonProcess:
    """`<role> serve --config PATH` (brokerd unless `role` says otherwise) as a child
    process, its stderr collected as it comes.

    stderr is a pipe read by a thread, not a file: a test may start brokerd with
    a file size limit of zero, which must not silence its log.
    """

    def __init__(
        self,
        config: Path,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
        role: str = "brokerd",
    ) -> None:
        self.config = config
        self.role = role
        self.stopped_cleanly: bool | None = None  # set by stop()
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [*console_script(role), "serve", "--config", str(config), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=clean_environment(env),
            preexec_fn=preexec,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while chunk := os.read(stream.fileno(), 65536):
            with self._lock:
                self._chunks.append(chunk)

    @property
    def stderr(self) -> str:
        """Everything the role has written so far (stdout and stderr together)."""
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float = 10.0) -> str:
        """The first line of the role's output for which `predicate` holds, waiting for it."""

        def matching() -> list[str]:
            return [line for line in self.stderr_lines() if predicate(line)]

        return wait_until(matching, timeout_s, f"a matching line from {self.role}")[0]

    def wait_serving(self, sockets: Sequence[Path], timeout_s: float = 30.0) -> None:
        """Until every socket in `sockets` accepts; RuntimeError if the process ends first."""

        def ready() -> bool:
            if self.process.poll() is not None:
                self._reader.join(5)
                raise RuntimeError(
                    f"{self.role} exited with {self.process.returncode}:\n{self.stderr}"
                )
            return all(accepts(path) for path in sockets)

        wait_until(ready, timeout_s, f"{self.role} accepting connections")

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        """The exit status of a role that stops by itself (refused to start)."""
        status = self.process.wait(timeout_s)
        self._finish()
        return status

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then the exit status. If it has not stopped after `timeout_s`, it is
        killed and `stopped_cleanly` is False."""
        self.stopped_cleanly = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.stopped_cleanly = False
                self.process.kill()
                self.process.wait()
        self._finish()
        return self.process.returncode

    def _finish(self) -> None:
        self._reader.join(5)
        if self.process.stdout is not None and not self._reader.is_alive():
            self.process.stdout.close()

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(timeout_s=5)
