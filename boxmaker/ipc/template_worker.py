"""Chat templates compiled and rendered in a child process, bounded whatever jinja2 does.

Its I/O: one child process (`boxmaker.ipc.template_child`) and the pipes to
it. `core.model.template_sandbox` bounds a template's every operation it knows of;
this is the floor under it, for whatever it does not know of. `WorkerTemplate`
is `ChatTemplate`'s stand-in (`core.model.template_sandbox.TemplateRenderer`): the same
construction but the clock, the same `render`, the same text, the same
`TemplateError`s. The rules:

1. **A fresh interpreter.** The child is `sys.executable -I` running
   `template_child` from the package this module came from: never a fork of
   loopd (whose address space holds the model), never reading `PYTHON*`
   variables or the working directory. It is started on first use and started
   again on the next use after it dies or is killed; it says `ready` within
   `START_SECONDS`, or the use fails.
2. **Memory.** The child caps its own address space at what it has mapped once
   started plus `memory_mib` (192 MiB by default), before it reads a request.
3. **Time.** Every compile and every render has a wall-clock deadline of
   `KILL_AFTER` times the template's `max_seconds` (a compile a render needs
   first, rule 5, is taken from the render's; the child's start is not: it is
   loopd's, not the template's). Past it the child is killed and the request
   refused ("ran for more than N s", as the sandbox's own clock says it), so a
   render of a long session is bounded like the sample's. The child's CPU-time
   limit ends it should the parent be gone.
4. **One request at a time**, under a lock: threads take turns. A request is
   the conversation as JSON (`core.wire.template_wire`) of at most `REQUEST_LIMIT`
   bytes; an answer may be at most what `max_output` characters take as JSON.
5. **Recompiled where needed.** A template is compiled in the child when it is
   made (so a template that does not compile is refused at construction, as
   `ChatTemplate` is), and again before a render whenever the child does not
   hold it (it was started again, or holds others since).
6. **Every outcome is a `TemplateError`.** A refusal from the child is passed on
   as it is (the sandbox's own text, as `ChatTemplate` raises it here); a child
   that dies answering is one line saying how (out of memory, out of time, the
   signal or status); a child that cannot be started is one line naming what to
   check.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import boxmaker
from boxmaker.core.errors import BoxmakerError, ErrorCode, FrameTooLargeError, ProtocolError
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.wire.template_wire import (
    Compile,
    Decoder,
    Done,
    Message,
    Ready,
    Refused,
    Render,
    Unknown,
    encode,
)
from boxmaker.ipc.template_child import EXIT_MEMORY

MEMORY_MIB = 192
START_SECONDS = 10.0
KILL_AFTER = 1.25
REQUEST_LIMIT = 64 << 20
CHUNK = 1 << 16
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from boxmaker.ipc.template_child import main; sys.exit(main(sys.argv[2:]))"
)


class _Child:
    """One started child process and its pipes."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self.stdin = process.stdin.fileno()
        self.stdout = process.stdout.fileno()
        os.set_blocking(self.stdin, False)

    def stop(self) -> None:
        """Kill the child and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.close_pipes()

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@dataclass
class _Budget:
    """The seconds a request (and a compile it needs first) has left (rule 3)."""

    left: float


class _DiedError(BoxmakerError):
    """The child ended before it answered."""


class TemplateWorker:
    """The child process that compiles and renders templates (the rules above)."""

    def __init__(
        self,
        *,
        memory_mib: int = MEMORY_MIB,
        start_seconds: float = START_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._memory_mib = memory_mib
        self._start_seconds = start_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._owner = os.getpid()  # a forked copy of this process starts a child of its own
        self._ids = itertools.count(1)

    def __enter__(self) -> TemplateWorker:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: none runs now), for logs and tests."""
        child = self._child
        return child.process.pid if child is not None and child.process.poll() is None else None

    def new_id(self) -> int:
        return next(self._ids)

    def close(self) -> None:
        """End the child: its stdin closed, it ends; killed if it does not at once."""
        with self._lock:
            child, self._child = self._child, None
            if child is None:
                return
            if child.process.stdin is not None:
                child.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=1.0)
            child.stop()

    def compile(self, request: Compile) -> None:
        """Rule 5: compile `request.source` in the child; TemplateError if it does not."""
        with self._lock:
            budget = _Budget(request.max_seconds * KILL_AFTER)
            self._answer(self._ask(request, request.max_seconds, 0, budget))

    def render(self, compiled: Compile, request: Render) -> str:
        """Rules 3 to 5: the template's text for `request`; TemplateError otherwise. A
        compile it needs first shares the render's deadline."""
        with self._lock:
            budget = _Budget(compiled.max_seconds * KILL_AFTER)
            seconds, output = compiled.max_seconds, compiled.max_output
            answer = self._ask(request, seconds, output, budget)
            if isinstance(answer, Unknown):
                self._answer(self._ask(compiled, seconds, 0, budget))
                answer = self._ask(request, seconds, output, budget)
            return self._answer(answer)

    # -- under the lock ---------------------------------------------------------

    @staticmethod
    def _answer(answer: Message) -> str:
        if isinstance(answer, Done):
            return answer.text
        if isinstance(answer, Refused):
            raise TemplateError(answer.reason)  # the sandbox's own words, as in this process
        raise TemplateError(f"the template worker answered {type(answer).__name__}")

    def _started(self) -> _Child:
        """The running child, started if there is none (rule 1)."""
        if self._owner != os.getpid():  # forked: the child and its pipes are the parent's
            self._child, self._owner = None, os.getpid()
        if self._child is not None and self._child.process.poll() is None:
            return self._child
        if self._child is not None:
            self._child.stop()
            self._child = None
        root = str(Path(boxmaker.__file__).resolve().parent.parent)
        argv = [sys.executable, "-I", "-c", _BOOT, root, str(self._memory_mib)]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
            )
        except OSError as exc:
            raise TemplateError(
                f"the template worker cannot start ({sys.executable}: {exc.strerror})"
            ) from exc
        child = _Child(process)
        try:
            ready = self._exchange(child, b"", self._start_seconds, 1024)
        except (_DiedError, TimeoutError, ProtocolError) as exc:
            child.stop()
            raise TemplateError(
                f"the template worker did not start within {self._start_seconds:g} s "
                f"({exc or type(exc).__name__}); check that {sys.executable} runs and "
                "imports boxmaker"
            ) from exc
        if not isinstance(ready, Ready):
            child.stop()
            raise TemplateError("the template worker started wrongly")
        self._child = child
        return child

    def _ask(
        self, request: Compile | Render, seconds: float, output: int, budget: _Budget
    ) -> Message:
        """Send `request` and read its answer within what is left of `budget` (rule 3's
        deadline; what the exchange took is taken from it, the child's start is not)."""
        try:
            payload = encode(request, REQUEST_LIMIT)
        except FrameTooLargeError as exc:
            raise TemplateError(
                f"the conversation is too large to render (over {REQUEST_LIMIT >> 20} MiB)"
            ) from exc
        child = self._started()
        if budget.left <= 0:
            raise TemplateError(f"the template ran for more than {seconds:g} s")
        limit = 6 * output + (1 << 16)  # every character escaped, and room for the frame
        start = self._clock()
        try:
            return self._exchange(child, payload, budget.left, limit)
        except TimeoutError as exc:
            child.stop()
            self._child = None
            raise TemplateError(f"the template ran for more than {seconds:g} s") from exc
        except ProtocolError as exc:
            child.stop()
            self._child = None
            raise TemplateError(f"the template worker broke the protocol ({exc})") from exc
        except _DiedError as exc:
            child.stop()
            self._child = None
            raise TemplateError(_death(child.process.returncode, seconds)) from exc
        finally:
            budget.left -= self._clock() - start

    def _exchange(self, child: _Child, payload: bytes, seconds: float, limit: int) -> Message:
        """Write `payload` and read one answer by the deadline: TimeoutError, _DiedError or
        ProtocolError otherwise."""
        deadline = self._clock() + seconds
        decoder = Decoder(limit)
        pending = memoryview(payload)
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            if pending:
                selector.register(child.stdin, selectors.EVENT_WRITE)
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    raise TimeoutError
                for key, _ in selector.select(left):
                    if key.fd == child.stdin:
                        try:
                            pending = pending[os.write(child.stdin, pending[:CHUNK]) :]
                        except BrokenPipeError as exc:
                            raise _DiedError from exc
                        if not pending:
                            selector.unregister(child.stdin)
                        continue
                    data = os.read(child.stdout, CHUNK)
                    if not data:
                        child.process.wait()
                        raise _DiedError
                    answers = decoder.feed(data)
                    if len(answers) > 1 or (answers and not decoder.idle):
                        raise ProtocolError(ErrorCode.MALFORMED, "more than one answer")
                    if answers:
                        return answers[0]


def _death(status: int | None, seconds: float) -> str:
    """Rule 6: how a child that died answering is told."""
    if status == -signal.SIGXCPU:
        return f"the template ran for more than {seconds:g} s"
    if status == EXIT_MEMORY:
        return "the template ran out of memory"
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the template worker died ({name}) running the template"
    return f"the template worker exited (status {status}) running the template"


_shared: TemplateWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> TemplateWorker:
    """This process's one worker, made on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = TemplateWorker()
            atexit.register(_shared.close)
        return _shared


class WorkerTemplate:
    """A chat template compiled and rendered in the worker (`ChatTemplate`'s stand-in)."""

    def __init__(
        self,
        source: str,
        *,
        worker: TemplateWorker | None = None,
        max_steps: int = 2_000_000,
        max_seconds: float = 5.0,
        max_output: int = 1 << 20,
    ) -> None:
        self.source = source
        self._worker = worker if worker is not None else shared_worker()
        self._compiled = Compile(
            id=self._worker.new_id(),
            source=source,
            max_steps=max_steps,
            max_seconds=max_seconds,
            max_output=max_output,
        )
        self._worker.compile(self._compiled)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        bos_token: str,
        eos_token: str,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """The template's text for `messages`; TemplateError on anything but text."""
        request = Render(
            id=self._compiled.id,
            messages=list(messages),
            tools=list(tools) if tools is not None else None,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            now=now.isoformat(),
            extra=dict(extra or {}),
        )
        return self._worker.render(self._compiled, request)
