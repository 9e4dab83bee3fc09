"""loopd for tests: in-process on a real socket, and scripted peers on real sockets.

I/O: temporary directories, Unix sockets, threads. No role imports this module.

    start_loopd / running_loopd   a `TurnLoop` over a given model (the scripted
                                  one, or the real one) and a `LoopServer` on
                                  `<home>/run/loop/loop.sock`, with a `BrokerPort`
                                  on a given broker socket, or none
    ScriptedServer                a tiny server on a real socket: it reads one
                                  request per connection and hands it, with the
                                  connection, to a script the test chose
    scripts for a fake brokerd    answer, pending_then, never_answer, close_early,
                                  answer_with_id
    fake_loopd_script             a fake loopd: scripted turn events, then turn_done
    RecordingModel                any model, its every generation recorded with
                                  its prompt and when its first text came
    merge_content                 turn events with each run of streamed content
                                  events joined into one, as a reader sees them

Nothing here sleeps to wait: waits poll a condition with a deadline (`wait_until`)
or block on an event that the test or the server's stop sets.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from boxmaker.core.chat_format import GEMMA, ChatFormat
from boxmaker.core.connection import ServerConnection
from boxmaker.core.frames import encode_frame
from boxmaker.core.messages import (
    ContentEvent,
    Envelope,
    Event,
    Message,
    PendingApprovalResponse,
    Turn,
    TurnDone,
    TurnEvent,
    encode_envelope,
)
from boxmaker.core.timestamps import format_timestamp, parse_timestamp
from boxmaker.ipc.server import bind_socket
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.model import Generation, Model
from boxmaker.loopd.serve import LoopServer
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLimits, TurnLoop
from boxmaker.testing.brokerd_harness import exchange, make_home, wait_until

LOOP_SOCKET = Path("run") / "loop" / "loop.sock"
STOP_TIMEOUT_S = 10.0


# --- a model that records what it was asked -------------------------------------------


@dataclass(frozen=True)
class Recorded:
    session: str
    prompt: list[int]
    generation: Generation
    started: float  # time.perf_counter() when generate was called
    first_text: float | None  # when the first text came (None: it wrote nothing)
    ended: float
    texts: tuple[str, ...] = ()  # every piece of text handed to on_text, in order


class RecordingModel:
    """`inner`, with every `generate` recorded in `calls` (thread-safe)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.chat_template = inner.chat_template
        self.calls: list[Recorded] = []
        self._lock = threading.Lock()

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        return self.inner.tokenize(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.inner.detokenize(ids)

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
    ) -> Generation:
        started = time.perf_counter()
        first: list[float] = []
        texts: list[str] = []

        def seen(text: str) -> None:
            if not first:
                first.append(time.perf_counter())
            texts.append(text)
            on_text(text)

        generation = self.inner.generate(
            session, prompt, max_tokens=max_tokens, stop=stop, on_text=seen
        )
        ended = time.perf_counter()
        record = Recorded(
            session,
            list(prompt),
            generation,
            started,
            first[0] if first else None,
            ended,
            tuple(texts),
        )
        with self._lock:
            self.calls.append(record)
        return generation


def merge_content(events: Sequence[Event]) -> list[Event]:
    """`events`, each run of consecutive content events joined into one."""
    merged: list[Event] = []
    for event in events:
        if isinstance(event, ContentEvent) and merged and isinstance(merged[-1], ContentEvent):
            merged[-1] = ContentEvent(text=merged[-1].text + event.text)
        else:
            merged.append(event)
    return merged


# --- loopd in this process -----------------------------------------------------------


@dataclass
class InProcessLoopd:
    """A serving loop.sock; `stop` (or leaving `running_loopd`) ends it."""

    home: Path
    model: Model
    turns: TurnLoop
    server: LoopServer
    port: BrokerPort | None
    _listening: socket.socket
    _thread: threading.Thread
    _made: list[Path] = field(default_factory=list)
    _stopped: bool = False

    @property
    def socket(self) -> Path:
        return self.home / LOOP_SOCKET

    def session_log(self, session: str) -> Path:
        return self.home / "loop" / "sessions" / f"{session}.jsonl"

    def turn(
        self,
        session: str,
        text: str,
        *,
        resume: bool = False,
        request_id: str = "turn-1",
        timeout_s: float = 30.0,
    ) -> list[Envelope]:
        """Every answer to one turn over loop.sock, the final one last."""
        message = Turn(session=session, text=text, resume=resume)
        return exchange(self.socket, message, request_id, timeout_s)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.server.stopping.set()
            self._thread.join(STOP_TIMEOUT_S)
            self._listening.close()
            self.socket.unlink(missing_ok=True)
        for made in self._made:
            shutil.rmtree(made, ignore_errors=True)


def _now() -> datetime:
    return datetime.now(UTC)


def start_loopd(
    base: Path,
    model: Model,
    *,
    home: Path | None = None,
    broker_socket: Path | None = None,
    timeout_ms: int = 120_000,
    limits: TurnLimits | None = None,
    chat_format: ChatFormat = GEMMA,
    clock: Callable[[], datetime] | None = None,
) -> InProcessLoopd:
    """Serve loop.sock in this process, with a home under `base` (or `home`, if given,
    which may be shared with a brokerd), and a broker port on `broker_socket` (None:
    no tool broker is configured)."""
    made: list[Path] = []
    if home is None:
        home = make_home(base)
        if home.parent != base:
            made.append(home.parent)
    port = BrokerPort(broker_socket, timeout_ms) if broker_socket is not None else None
    turns = TurnLoop(
        model,
        chat_format,
        SessionLogs(home),
        port,
        limits if limits is not None else TurnLimits(),
        clock if clock is not None else _now,
    )
    listening = bind_socket(home / LOOP_SOCKET, backlog=16)
    server = LoopServer(turns, listening)
    thread = threading.Thread(target=server.serve, name="loopd-accept", daemon=True)
    thread.start()
    return InProcessLoopd(home, model, turns, server, port, listening, thread, made)


@contextmanager
def running_loopd(
    base: Path,
    model: Model,
    *,
    home: Path | None = None,
    broker_socket: Path | None = None,
    timeout_ms: int = 120_000,
    limits: TurnLimits | None = None,
    chat_format: ChatFormat = GEMMA,
    clock: Callable[[], datetime] | None = None,
) -> Iterator[InProcessLoopd]:
    loopd = start_loopd(
        base,
        model,
        home=home,
        broker_socket=broker_socket,
        timeout_ms=timeout_ms,
        limits=limits,
        chat_format=chat_format,
        clock=clock,
    )
    try:
        yield loopd
    finally:
        loopd.stop()


# --- scripted servers ----------------------------------------------------------------


class Peer:
    """One accepted connection, as a script sees it: the request and ways to answer."""

    def __init__(self, sock: socket.socket, request: Envelope, stopping: threading.Event) -> None:
        self.sock = sock
        self.request = request
        self._stopping = stopping

    def send(self, message: Message, *, final: bool, request_id: str | None = None) -> None:
        """One answer frame, carrying the request's id unless `request_id` says otherwise."""
        ident = self.request.id if request_id is None else request_id
        envelope = Envelope(id=ident, final=final, message=message)
        self.sock.sendall(encode_frame(encode_envelope(envelope)))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def hold(self, timeout_s: float = 60.0) -> None:
        """Answer nothing until the server stops (or the peer goes away)."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(0.05)
        while not self._stopping.is_set() and time.monotonic() < deadline:
            try:
                if not self.sock.recv(1):
                    return  # the client went away
            except TimeoutError:
                continue
            except OSError:
                return

    def wait_past(self, moment: str, extra_ms: int = 0, timeout_s: float = 30.0) -> None:
        """Return once the wall clock is past the timestamp `moment` plus `extra_ms`."""
        target = (parse_timestamp(moment) + timedelta(milliseconds=extra_ms)).timestamp()
        wait_until(lambda: time.time() > target, timeout_s, f"the clock past {moment}")


Script = Callable[[Peer], None]


class ScriptedServer:
    """A listening Unix socket; each connection's request is read, then `script` answers it.

    `requests` holds every request read, in order; `connections` counts the
    connections accepted (a request that never came still counts).
    """

    def __init__(self, path: Path, script: Script) -> None:
        self.path = path
        self.script = script
        self.requests: list[Envelope] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listening = bind_socket(path, backlog=16)
        self._listening.settimeout(0.05)
        self._accepting = threading.Thread(target=self._accept, name="scripted-accept")
        self._accepting.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listening.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
            worker = threading.Thread(target=self._serve, args=(sock,), name="scripted-conn")
            with self._lock:
                self._threads.append(worker)
            worker.start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                request = self._read_request(sock)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                sock.settimeout(None)
                self.script(Peer(sock, request, self._stopping))
            except OSError:
                pass  # the client went away: what a script does next is moot
            except BaseException as exc:  # a broken script must fail the test, not vanish
                with self._lock:
                    self.errors.append(exc)

    def _read_request(self, sock: socket.socket) -> Envelope | None:
        conn = ServerConnection()
        deadline = time.monotonic() + 10.0
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(min(left, 0.05))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return None
            envelope = conn.receive(data)
            if envelope is not None:
                return envelope
        return None

    def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> None:
        def enough() -> bool:
            with self._lock:
                return len(self.requests) >= count

        wait_until(enough, timeout_s, f"{count} requests")

    def stop(self) -> None:
        self._stopping.set()
        self._accepting.join(STOP_TIMEOUT_S)
        self._listening.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(STOP_TIMEOUT_S)
        self.path.unlink(missing_ok=True)
        if self.errors:
            raise RuntimeError(f"a scripted server's script failed: {self.errors[0]!r}")

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- scripts for a fake brokerd ------------------------------------------------------


def in_ms(ms: int) -> str:
    """The timestamp `ms` milliseconds from now."""
    return format_timestamp(datetime.now(UTC) + timedelta(milliseconds=ms))


def answer(message: Message) -> Script:
    """Answer every request with `message`, final."""

    def script(peer: Peer) -> None:
        peer.send(message, final=True)

    return script


def answer_with_id(message: Message, request_id: str) -> Script:
    """Answer with `message`, final, under an id that is not the request's."""

    def script(peer: Peer) -> None:
        peer.send(message, final=True, request_id=request_id)

    return script


def pending_then(
    final: Message | None,
    *,
    approval: int = 41,
    expires_in_ms: int = 900_000,
    after_expiry_ms: int | None = None,
    until: threading.Event | None = None,
) -> Script:
    """A pending_approval frame, then `final` (None: nothing more, the connection held).

    `after_expiry_ms`: send the final frame only once the clock is that far past
    the pending frame's `expires`. `until`: send it only once this event is set.
    """

    def script(peer: Peer) -> None:
        expires = in_ms(expires_in_ms)
        peer.send(PendingApprovalResponse(approval=approval, expires=expires), final=False)
        if until is not None:
            until.wait(60.0)
        if after_expiry_ms is not None:
            peer.wait_past(expires, after_expiry_ms)
        if final is None:
            peer.hold()
        else:
            peer.send(final, final=True)

    return script


def never_answer(peer: Peer) -> None:
    """Accept the request and answer nothing, holding the connection."""
    peer.hold()


def close_early(peer: Peer) -> None:
    """Read the request and close the connection without a word."""


def sequence(*scripts: Script) -> Script:
    """The first connection gets the first script, the next the next; the last repeats."""
    lock = threading.Lock()
    remaining = list(scripts)

    def script(peer: Peer) -> None:
        with lock:
            chosen = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        chosen(peer)

    return script


# --- a fake loopd --------------------------------------------------------------------


def fake_loopd_script(events: Sequence[Event], content: str = "done") -> Script:
    """A loopd that answers every turn with `events`, then turn_done with `content`."""

    def script(peer: Peer) -> None:
        turn = peer.request.message
        assert isinstance(turn, Turn), f"a fake loopd got {turn.kind}"
        for event in events:
            peer.send(TurnEvent(event=event), final=False)
        peer.send(TurnDone(session=turn.session, content=content, untrusted=False), final=True)

    return script
