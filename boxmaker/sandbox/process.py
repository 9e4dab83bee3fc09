"""Talking to a sandboxed child: send it its request, read its answer, within limits.

I/O: the child's pipes. `exchange` writes the request to standard input and
keeps it open (the toolkit takes its end as brokerd going away), reads
standard output and standard error until the child closes them, and stops early
(killing the child's process group) when the deadline passes or the output
exceeds what a correct answer can be: a process in the sandbox must not be able
to make brokerd buffer without bound or wait for ever.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

STDERR_LIMIT = 65536


@dataclass(frozen=True)
class Exchanged:
    stdout: bytes
    stderr: bytes
    status: int | None  # None when it was killed for time or size
    timed_out: bool
    too_large: bool


def exchange(
    proc: subprocess.Popen[bytes], request: bytes, timeout_s: float, limit: int
) -> Exchanged:
    """Everything the child says in answer to `request`, bounded in time and size."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    out, err = bytearray(), bytearray()
    pending = memoryview(request)
    selector = selectors.DefaultSelector()
    os.set_blocking(proc.stdin.fileno(), False)
    selector.register(proc.stdin, selectors.EVENT_WRITE)
    selector.register(proc.stdout, selectors.EVENT_READ)
    selector.register(proc.stderr, selectors.EVENT_READ)
    timed_out = too_large = False
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in selector.select(min(left, 0.5)):
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]) :]
                    except BrokenPipeError:
                        pending = pending[len(pending) :]
                    if not pending:
                        selector.unregister(proc.stdin)  # open until the child is done
                    continue
                assert stream is proc.stdout or stream is proc.stderr
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    selector.unregister(stream)
                    continue
                if stream is proc.stdout:
                    out += chunk
                    if len(out) > limit:
                        too_large = True
                        break
                elif len(err) < STDERR_LIMIT:
                    err += chunk[: STDERR_LIMIT - len(err)]
            if too_large:
                break
    finally:
        selector.close()
    if timed_out or too_large:
        kill_group(proc)
    status = proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if not stream.closed:
            stream.close()
    if timed_out or too_large:
        return Exchanged(bytes(out), bytes(err), None, timed_out, too_large)
    return Exchanged(bytes(out), bytes(err), status, False, False)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (it was started in a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
