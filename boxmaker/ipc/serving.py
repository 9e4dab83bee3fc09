"""The one socket server of every role: binding, and serving a listening socket with
threads that take turns, up to its cap.

I/O: the file system (a link's directory and socket modes), Unix sockets, threads.
One connection's reading and answering is `ipc.connection`'s (its rules 4 and 5); the
rules here, per listening socket:

    1. Each accepted connection is served in a thread of its own, and at most `cap`
       connections of one socket are served at once (each socket its own cap, so a
       full broker.sock never keeps the owner out of admin.sock). The threads take
       turns (`Serving`, leader and followers): one waits in `accept`, hands that
       wait to another thread when a connection comes, and serves the connection
       itself; a thread that finished a connection waits IDLE_WORKER_S to lead
       again before it ends. A busy socket starts no thread per connection; the
       threads number about the connections served at once, plus the leader.
    2. A connection over the cap is refused by the leader at once, without a
       thread and without waiting: if its request is already in the socket (as it
       is when the connection waited in the backlog, since a client sends on
       connecting) it is answered `unavailable` with one line and the busy pointer;
       otherwise it is closed, which a client reads as `unavailable` too. It is not
       left in the backlog, where its client would wait out its whole timeout.
       One exception: while a connection of the socket is sending its final
       answer, its slot is as good as free (its client may already be connecting
       again, and a client that makes one call after another must not be refused
       because the last call's thread has not yet closed), so the leader waits up
       to FINISH_GRACE_S for that slot before refusing.
    3. When accept fails (EMFILE, ENFILE or anything else), the leader waits
       before trying again, from 10 ms doubling to at most 1 s, starting over after
       the next success. Such failures and refusals are one warning line (no
       traceback) at most every LOG_EVERY_S seconds, with how many there were.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Protocol

from boxmaker.core.errors import ErrorCode, ProtocolError, StartupError
from boxmaker.core.home.links import DEV, Link, LinkModes, kind_of
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.connection import ServerConnection
from boxmaker.core.wire.frames import MAX_FRAME, PREFIX
from boxmaker.ipc.connection import Connection, Handlers, SocketRules

log = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
FIRST_BACKOFF_S = 0.01
MAX_BACKOFF_S = 1.0
IDLE_WORKER_S = 30.0
FINISH_GRACE_S = 1.0  # how long a leader waits for a slot that is being given back
ACCEPT_POLL_S = 0.2  # how soon the leader sees a stop


def bind_socket(path: Path, modes: LinkModes = DEV, backlog: int = 64) -> socket.socket:
    """A listening socket at `path`, its directory and itself at `modes`; StartupError if not.

    The directory is made if missing and its mode set whether made or found. A
    stale socket file is removed: the caller has made sure no other server of
    its kind is running (brokerd holds the audit lock).
    """
    directory = path.parent
    try:
        directory.mkdir(mode=modes.directory, parents=True, exist_ok=True)
        # only when it differs: a chmod by a user outside the directory's group
        # clears its set-group-id bit, and the socket would lose the link's group
        if stat.S_IMODE(directory.stat().st_mode) != modes.directory:
            os.chmod(directory, modes.directory)
    except OSError as exc:
        raise StartupError(f"cannot prepare the socket directory {directory}: {exc}") from exc
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot remove the stale socket {path}: {exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o777 & ~modes.socket)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, modes.socket)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {path}: {exc}") from exc
    return sock


def check_handlers(link: Link, handlers: Handlers) -> None:
    """StartupError unless `handlers` has a handler for each kind `link` accepts and
    for no other kind (rule 4)."""
    accepted, handled = set(link.accepts), set(map(kind_of, handlers))
    if accepted == handled:
        return
    problems = []
    if unhandled := accepted - handled:
        problems.append("no handler for " + ", ".join(sorted(unhandled)))
    if unaccepted := handled - accepted:
        problems.append("handlers for kinds it does not accept: " + ", ".join(sorted(unaccepted)))
    raise StartupError(f"cannot serve {link.directory}/{link.socket}: {'; '.join(problems)}")


class Listening(Protocol):
    """What the accept loop needs of a listening socket (a `socket.socket`)."""

    def settimeout(self, value: float | None, /) -> None: ...

    def accept(self) -> tuple[socket.socket, object]: ...


class Throttled:
    """A warning logged at most once every `every_s` seconds, counting the rest."""

    def __init__(self, every_s: float = LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._last: float | None = None
        self._count = 0

    def warn(self, text: str, *args: object) -> None:
        self._count += 1
        now = time.monotonic()
        if self._last is not None and now - self._last < self._every_s:
            return
        log.warning(text + " times=%d", *args, self._count)
        self._last, self._count = now, 0


def serve_forever(
    listening: Listening,
    rules: SocketRules,
    handlers: Handlers,
    stopping: threading.Event,
) -> Serving:
    """Serve connections on `listening` by the rules above, each request by the handler
    of its kind, until `stopping` is set; StartupError if `handlers` are not exactly
    the link's kinds (rule 4)."""
    check_handlers(rules.link, handlers)
    # before the first thread starts: a stop that closes the socket while a thread
    # set its timeout would make that call fail in the thread (EBADF)
    listening.settimeout(ACCEPT_POLL_S)
    serving = Serving(listening, rules, dict(handlers), stopping)
    serving.start()
    return serving


class Serving:
    """The threads of one listening socket, leader and followers (rule 1).

    One thread leads: it waits in `accept`. Once it has a connection (and a slot
    for it), it hands the lead to an idle follower, or starts a thread to lead,
    and serves the connection itself; then it follows, waiting IDLE_WORKER_S to
    lead again before it ends. A connection is served by the thread that woke
    for it: no queue between accepting and serving, and no second thread to wake
    before the request is read (the hand-over wakes the next leader meanwhile).
    This is the leader/followers pattern (Schmidt et al., 2000); with the thread
    pool it replaced (an accept thread handing each connection to a worker), a
    denied call to brokerd took about 1.6 times as long on this project's
    machine (docs/performance.md).

    `join` waits for the lead to end after `stopping` is set, as the accept
    thread's join did.
    """

    def __init__(
        self,
        listening: Listening,
        rules: SocketRules,
        handlers: Handlers,
        stopping: threading.Event,
    ) -> None:
        self._listening = listening
        self._rules = rules
        self._handlers = handlers
        self._stopping = stopping
        self._slots = threading.BoundedSemaphore(rules.cap)
        self._turn = threading.Condition()
        self._idle = 0  # followers waiting to lead
        self._promoted = 0  # leads handed to followers and not yet taken; never above _idle
        self._ended = threading.Event()
        self._finishing = 0  # connections sending their final answer, slot not yet given back
        self._finishing_lock = threading.Lock()
        self._failures = Throttled()
        self._refusals = Throttled()

    def start(self) -> None:
        """Start the first leader; RuntimeError if no thread can be started."""
        self._spawn()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    def is_alive(self) -> bool:
        return not self._ended.is_set()

    def _spawn(self) -> None:
        threading.Thread(target=self._lead, name=f"conn-{self._rules.name}", daemon=True).start()

    def _lead(self) -> None:
        while True:
            sock = self._accept()
            if sock is None:  # stopping: no more leaders, and the followers go too
                with self._turn:
                    self._ended.set()
                    self._turn.notify_all()
                return
            if not self._hand_over():  # nobody could lead meanwhile: refuse, lead on
                self._slots.release()
                self._failures.warn("event=thread_failed socket=%s", self._rules.name)
                refuse(sock, self._rules)
                continue
            conn = Connection(sock, self._rules, self._finish_begun)
            _run(self._handlers, conn, self._slots)
            if conn.finishing:
                self._count_finishing(-1)  # after its slot was given back
            if not self._follow():
                return

    def _accept(self) -> socket.socket | None:
        """The next connection with a slot (rules 2 and 3 on the way); None once stopping."""
        rules = self._rules
        delay = FIRST_BACKOFF_S
        while not self._stopping.is_set():
            try:
                sock, _ = self._listening.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return None
                code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                self._failures.warn(
                    "event=accept_failed socket=%s error=%s wait_s=%g", rules.name, code, delay
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay = FIRST_BACKOFF_S
            if self._slot():
                return sock
            self._refusals.warn(
                "event=connections_full socket=%s cap=%d %s",
                rules.name,
                rules.cap,
                rules.busy_pointer,
            )
            refuse(sock, rules)
        return None

    def _slot(self) -> bool:
        """A slot for the connection just accepted: at once, or within FINISH_GRACE_S
        while a connection is sending its final answer (rule 2); False if none."""
        if self._slots.acquire(blocking=False):
            return True
        if self._finishing and self._slots.acquire(timeout=FINISH_GRACE_S):
            return True
        # a slot given back, and its connection counted out, after the first try
        return self._slots.acquire(blocking=False)

    def _finish_begun(self) -> None:
        self._count_finishing(1)

    def _count_finishing(self, change: int) -> None:
        with self._finishing_lock:
            self._finishing += change

    def _hand_over(self) -> bool:
        """Give the lead to an idle follower, or to a new thread; False if neither can take it."""
        with self._turn:
            if self._idle > self._promoted:
                self._promoted += 1
                self._turn.notify()
                return True
        try:
            self._spawn()
        except RuntimeError:
            return False
        return True

    def _follow(self) -> bool:
        """Wait to lead again: True when handed the lead, False after IDLE_WORKER_S or a stop."""
        deadline = time.monotonic() + IDLE_WORKER_S
        with self._turn:
            self._idle += 1
            try:
                while not self._promoted:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._ended.is_set():
                        return False
                    self._turn.wait(left)
                self._promoted -= 1
                return True
            finally:
                self._idle -= 1


def refuse(sock: socket.socket, rules: SocketRules) -> None:
    """Rule 2: answer `unavailable` if the request is already here, then close; never waits."""
    try:
        sock.setblocking(False)
        protocol = ServerConnection()
        envelope = None
        taken = 0
        while envelope is None and taken <= MAX_FRAME + PREFIX:
            data = sock.recv(65536)
            if not data:
                return
            taken += len(data)
            envelope = protocol.receive(data)
        if envelope is None:
            return
        message = Error(
            code=ErrorCode.UNAVAILABLE,
            message=f"{rules.role} is serving its limit of {rules.cap} connections on"
            f" {rules.name}; try again later, {rules.busy_pointer}",
        )
        sock.send(protocol.answer(message, final=True))
    except (OSError, ProtocolError):
        pass  # nothing (complete) to answer, or no room to answer it: closing says enough
    finally:
        sock.close()


def dispatch(conn: Connection, handlers: Handlers) -> None:
    """Read the request (rule 4) and hand its message to the handler of its kind."""
    message = conn.read_request().message
    handlers[type(message)](conn, message)


def _run(handlers: Handlers, conn: Connection, slots: threading.BoundedSemaphore) -> None:
    try:
        dispatch(conn, handlers)
    except ProtocolError as exc:
        conn.send_error(exc)
    except TimeoutError as exc:
        log.info("event=idle_timeout socket=%s why=%s", conn.name, exc)
    except ConnectionError as exc:  # closed, reset or broken pipe: the client left
        log.info("event=peer_closed socket=%s why=%s", conn.name, exc)
    except Exception:
        log.exception("event=connection_failed socket=%s", conn.name)
        conn.send_error(ProtocolError(ErrorCode.INTERNAL, f"{conn.rules.role} failed; see its log"))
    finally:
        conn.close()
        slots.release()
