"""`loopd serve` as a real process, its log in a file as supervisord keeps it, for the tests
that read that log whole (the twenty fresh starts, the hostile model files).

I/O: a temporary home and loopd.toml, a child process, its log file, a signal. No role
imports this module.

    write_loopd_config   a loopd.toml on a home of its own for a model file: no tool
                         broker, no memory block (`"none"`), so loopd serves alone
    LoopdRun             `loopd serve --config` started with stdout and stderr on one
                         log file (fds 1 and 2 a file, as supervisord gives them), waited
                         for until its log says `event=serving` or it exits, stopped with
                         SIGTERM; `peak_rss_mib` is the most memory it and its children
                         (the probe child) held, from wait4

Nothing here sleeps to wait: `wait_until` polls with a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO

import tomli_w

from boxmaker.testing.processes import clean_environment, console_script
from boxmaker.testing.sockets import accepts
from boxmaker.testing.waiting import wait_until

SERVING = "event=serving"


def write_loopd_config(where: Path, model: Path, **model_keys: object) -> Path:
    """`where`/loopd.toml, its home `where`/home: `model`, no broker, no memory block."""
    home = where / "home"
    home.mkdir(parents=True, exist_ok=True)
    config = where / "loopd.toml"
    settings = {
        "paths": {"home": str(home)},
        "model": {"path": str(model), **model_keys},
        "broker": {"socket": "none"},
        "memory": {"socket": "none"},
    }
    config.write_text(tomli_w.dumps(settings))
    return config


class LoopdRun:
    """`loopd serve --config CONFIG` (or `command` instead of `serve`), its output on `log`."""

    def __init__(self, config: Path, log: Path, command: str = "serve") -> None:
        self.log = log
        self.peak_rss_mib: float | None = None
        self.returncode: int | None = None
        self._out: IO[bytes] = log.open("wb")
        self.process = subprocess.Popen(
            [*console_script("loopd"), command, "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=clean_environment(),
        )

    def text(self) -> str:
        return self.log.read_bytes().decode("utf-8", "replace")

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def wait_serving_or_exit(self, timeout_s: float, socket: Path | None = None) -> bool:
        """True once the log says `event=serving`; False when loopd exited first. With
        `socket`, also once loop.sock accepts: whether the log then says so is the
        caller's to judge (`logged_serving`), so a log that lost the line fails fast."""

        def settled() -> str | None:
            if SERVING in self.text() or (socket is not None and accepts(socket)):
                return "serving"
            if self.returncode is not None or self._reaped():
                return "exited"
            return None

        return wait_until(settled, timeout_s, "loopd serving or exiting") == "serving"

    def logged_serving(self, timeout_s: float = 10.0) -> bool:
        """Whether the log says `event=serving` within `timeout_s` (loopd logs it as soon
        as its socket is bound: a log without it then has lost it)."""
        try:
            wait_until(lambda: SERVING in self.text(), timeout_s, "event=serving in the log")
        except TimeoutError:
            return False
        return True

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (if it still runs), then its exit status; `peak_rss_mib` is set."""
        if self.returncode is None:
            # os.kill, not Popen's: Popen would reap it first, and wait4's figures with it
            os.kill(self.process.pid, signal.SIGTERM)
            wait_until(self._reaped, timeout_s, "loopd to exit")
        return self.returncode if self.returncode is not None else -1

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status of a loopd that stops by itself; `peak_rss_mib` is set."""
        if self.returncode is None:
            wait_until(self._reaped, timeout_s, "loopd to exit by itself")
        return self.returncode if self.returncode is not None else -1

    def _reaped(self) -> bool:
        """Whether loopd has exited (reaped here, with its figures, never by Popen)."""
        if self.returncode is not None:
            return True
        pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        self.process.returncode = self.returncode
        self.peak_rss_mib = usage.ru_maxrss / 1024  # kB; itself and its waited children
        self._out.close()
        return True

    def __enter__(self) -> LoopdRun:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.returncode is None:
            os.kill(self.process.pid, signal.SIGKILL)
            wait_until(self._reaped, 30.0, "loopd to exit after SIGKILL")
