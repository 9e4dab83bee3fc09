"""brokerd and loopd in the test's own process, on real Unix sockets.

I/O: temporary directories, Unix sockets, threads, and brokerd's audit files. No
role imports this module.

    start_brokerd / running_brokerd   a `serve.Brokerd` on real Unix sockets, with a
                                      real `AuditWriter` from `start_audit` (its file
                                      operations behind `FailingFiles`, which fails
                                      on demand), a `RecordingRuntime`, a `Clock`,
                                      and a grants directory whose next load can run
                                      a hook (`HookedGrantsDir`); `restart` stops it
                                      and starts another over the same home
    start_loopd / running_loopd       a `TurnLoop` over a given model (the scripted
                                      one, or the real one) and a `LoopServer` on the
                                      home's loop.sock, with a `BrokerPort` on a
                                      given broker socket, or none, and a
                                      `MemoryPort` on a given memory socket, or none

Every path under a home comes from `boxmaker.core.layout.Home`. The real console
scripts as child processes are `boxmaker.testing.processes`.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.brokerd.audit_writer import AuditFiles
from boxmaker.brokerd.config import (
    ApprovalsSection,
    BrokerdConfig,
    GatewaySection,
    MemorySection,
    PathsSection,
    SocketsSection,
)
from boxmaker.brokerd.descriptors import DEFAULT_CAPS, ConnectionCaps
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.serve import Brokerd
from boxmaker.core.audit_records import AuditRecord
from boxmaker.core.chat_format import GEMMA, ChatFormat
from boxmaker.core.dialect import Dialect
from boxmaker.core.grants import GrantSet
from boxmaker.core.layout import Home
from boxmaker.core.messages import Envelope, Message, StatusReport, ToolRequest, Turn
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.server import bind_socket
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.memory_port import MemoryPort
from boxmaker.loopd.model import Model
from boxmaker.loopd.serve import LoopServer
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLimits, TurnLoop
from boxmaker.memoryd.handlers import MemoryHandlers
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.serve import Listeners, MemoryServer
from boxmaker.memoryd.store import MemoryStore
from boxmaker.testing.homes import make_home, read_records
from boxmaker.testing.runtime import RecordingRuntime
from boxmaker.testing.sockets import OpenCall, exchange

STOP_TIMEOUT_S = 10.0


# --- brokerd's seams ------------------------------------------------------------------


class FailingFiles(AuditFiles):
    """Real audit file operations, until told to fail: then every write raises EIO."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allowed: int | None = None  # writes still allowed; None: no limit
        self.writes = 0

    def fail_now(self) -> None:
        self.fail_after(0)

    def fail_after(self, writes: int) -> None:
        """Let `writes` more writes through, then fail every one after them."""
        with self._lock:
            self._allowed = writes

    def heal(self) -> None:
        """Writes would succeed again (the writer, once broken, still refuses)."""
        with self._lock:
            self._allowed = None

    def write(self, fd: int, data: bytes) -> int:
        with self._lock:
            if self._allowed is not None:
                if self._allowed <= 0:
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                self._allowed -= 1
            self.writes += 1
        return super().write(fd, data)


class HookedGrantsDir(GrantsDir):
    """The real grants directory; `before_next_load` runs once, inside the next load."""

    def __init__(self, directory: Path, places: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(directory, places)
        self._hook_lock = threading.Lock()
        self._hook: Callable[[], None] | None = None

    def before_next_load(self, hook: Callable[[], None]) -> None:
        with self._hook_lock:
            self._hook = hook

    def load(self) -> GrantSet:
        with self._hook_lock:
            hook, self._hook = self._hook, None
        if hook is not None:
            hook()
        return super().load()


class Clock:
    """Wall-clock time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self._offset = timedelta()
        self._lock = threading.Lock()

    def advance(self, ms: int) -> None:
        with self._lock:
            self._offset += timedelta(milliseconds=ms)

    def __call__(self) -> str:
        with self._lock:
            offset = self._offset
        return format_timestamp(datetime.now(UTC) + offset)


# --- brokerd in this process -------------------------------------------------------


@dataclass
class InProcessBrokerd:
    """A started `Brokerd`; `stop` (or leaving the `running_brokerd` block) ends it."""

    home: Path
    grants_dir: Path
    config: BrokerdConfig
    daemon: Brokerd
    runtime: RecordingRuntime
    files: FailingFiles
    grants: HookedGrantsDir
    clock: Callable[[], str]
    _made: list[Path] = field(default_factory=list)
    _stopped: bool = False

    @property
    def broker_socket(self) -> Path:
        return self.config.broker_socket

    @property
    def admin_socket(self) -> Path:
        return self.config.admin_socket

    def tool(self, message: Message, request_id: str = "t1") -> list[Envelope]:
        return exchange(self.broker_socket, message, request_id)

    def admin(self, message: Message, request_id: str = "a1") -> list[Envelope]:
        return exchange(self.admin_socket, message, request_id)

    def open_call(self, request: ToolRequest) -> OpenCall:
        return OpenCall(self.broker_socket, request)

    def records(self) -> list[AuditRecord]:
        return read_records(self.home)

    def restart(self, between: Callable[[], None] | None = None) -> InProcessBrokerd:
        """Stop this brokerd (its pending approvals are lost: their waiting threads find
        no ledger to write to) and start another over the same home, grants, runtime
        and clock, as `brokerd serve` started again would: the audit startup check
        runs first. `between` runs while neither is running. The new one removes,
        when it stops, what this one made."""
        if not self._stopped:
            self._stopped = True
            self.daemon.stop()
        if between is not None:
            between()
        again = start_brokerd(
            self.home.parent,
            home=self.home,
            grants_dir=self.grants_dir,
            ttl_ms=self.config.approvals.ttl_ms,
            runtime=self.runtime,
            clock=self.clock,
            caps=self.daemon.caps,
            memory=self.config.memory,
            gateway=self.config.gateway,
        )
        again._made, self._made = self._made, []
        return again

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.daemon.stop()
        for made in self._made:
            shutil.rmtree(made, ignore_errors=True)


def start_brokerd(
    base: Path,
    *,
    home: Path | None = None,
    grants_dir: Path | None = None,
    ttl_ms: int = 900_000,
    runtime: RecordingRuntime | None = None,
    clock: Callable[[], str] | None = None,
    caps: ConnectionCaps = DEFAULT_CAPS,
    memory: MemorySection | None = None,
    gateway: GatewaySection | None = None,
) -> InProcessBrokerd:
    """Start brokerd's sockets and threads in this process, with a new home under
    `base`, or over `home` (one a brokerd used before) if given."""
    made: list[Path] = []
    if home is None:
        home = make_home(base)
        made = [] if home.parent == base else [home.parent]
    grants = grants_dir if grants_dir is not None else base / "grants"
    grants.mkdir(parents=True, exist_ok=True)
    config = BrokerdConfig(
        paths=PathsSection(home=str(home), grants=str(grants)),
        sockets=SocketsSection(),
        approvals=ApprovalsSection(ttl_ms=ttl_ms),
        memory=memory if memory is not None else MemorySection(),
        gateway=gateway if gateway is not None else GatewaySection(),
    )
    the_clock = clock if clock is not None else Clock()
    files = FailingFiles()
    started = start_audit(Home(home).audit, the_clock(), files=files)
    if not isinstance(started, Started):
        raise RuntimeError(f"audit startup refused: {started.lines}")
    the_runtime = runtime if runtime is not None else RecordingRuntime()
    daemon = Brokerd(config, started.writer, the_runtime, the_clock, caps)
    hooked = HookedGrantsDir(config.grants_dir, daemon.grants.reserved)
    daemon.grants = hooked
    daemon.start()
    return InProcessBrokerd(
        home, grants, config, daemon, the_runtime, files, hooked, the_clock, made
    )


@contextmanager
def running_brokerd(
    base: Path,
    *,
    grants_dir: Path | None = None,
    ttl_ms: int = 900_000,
    runtime: RecordingRuntime | None = None,
    clock: Callable[[], str] | None = None,
    caps: ConnectionCaps = DEFAULT_CAPS,
    memory: MemorySection | None = None,
    gateway: GatewaySection | None = None,
) -> Iterator[InProcessBrokerd]:
    brokerd = start_brokerd(
        base,
        grants_dir=grants_dir,
        ttl_ms=ttl_ms,
        runtime=runtime,
        clock=clock,
        caps=caps,
        memory=memory,
        gateway=gateway,
    )
    try:
        yield brokerd
    finally:
        brokerd.stop()


# --- loopd in this process -----------------------------------------------------------

MEMORY_TIMEOUT_MS = 10_000  # an in-process loopd's wait for memoryd


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
    memory: MemoryPort | None = None

    @property
    def socket(self) -> Path:
        return Home(self.home).loop_socket

    def session_log(self, session: str) -> Path:
        return Home(self.home).loop_sessions / f"{session}.jsonl"

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
    chat_format: ChatFormat | Dialect = GEMMA,
    clock: Callable[[], datetime] | None = None,
    memory_socket: Path | None = None,
) -> InProcessLoopd:
    """Serve loop.sock in this process, with a home under `base` (or `home`, if given,
    which may be shared with a brokerd), a broker port on `broker_socket` (None:
    no tool broker is configured), and a memory port on `memory_socket` (None: no
    memory block)."""
    made: list[Path] = []
    if home is None:
        home = make_home(base)
        if home.parent != base:
            made.append(home.parent)
    port = BrokerPort(broker_socket, timeout_ms) if broker_socket is not None else None
    memory = MemoryPort(memory_socket, MEMORY_TIMEOUT_MS) if memory_socket is not None else None
    turns = TurnLoop(
        model,
        chat_format,
        SessionLogs(home),
        port,
        limits if limits is not None else TurnLimits(),
        clock if clock is not None else _now,
        memory=memory,
    )
    listening = bind_socket(Home(home).loop_socket, backlog=16)
    server = LoopServer(turns, listening)
    thread = threading.Thread(target=server.serve, name="loopd-accept", daemon=True)
    thread.start()
    return InProcessLoopd(home, model, turns, server, port, listening, thread, made, memory=memory)


@contextmanager
def running_loopd(
    base: Path,
    model: Model,
    *,
    home: Path | None = None,
    broker_socket: Path | None = None,
    timeout_ms: int = 120_000,
    limits: TurnLimits | None = None,
    chat_format: ChatFormat | Dialect = GEMMA,
    clock: Callable[[], datetime] | None = None,
    memory_socket: Path | None = None,
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
        memory_socket=memory_socket,
    )
    try:
        yield loopd
    finally:
        loopd.stop()


# --- memoryd --------------------------------------------------------------------------


@contextmanager
def running_memoryd(
    home: Home, clock: Callable[[], datetime] = _now
) -> Iterator[tuple[MemoryStore, RecallIndex]]:
    """memoryd's three sockets served in this process for `home`, until the block ends."""
    store = MemoryStore(home.memory, clock)
    recall = RecallIndex(home.memory)
    recall.rebuild()
    listeners = Listeners(
        bind_socket(home.loop_memory_socket),
        bind_socket(home.broker_memory_socket),
        bind_socket(home.owner_memory_socket),
    )

    def status() -> StatusReport:
        return StatusReport(
            role="memoryd", version="0", started="2026-11-30T12:00:00.000Z", detail="test"
        )

    server = MemoryServer(MemoryHandlers(store, recall), listeners, status)
    threads = server.start()
    try:
        yield store, recall
    finally:
        server.stopping.set()
        for thread in threads:
            thread.join(timeout=5)
        listeners.close()
