"""brokerd, loopd and memoryd in the test's own process, on real Unix sockets.

I/O: temporary directories, Unix sockets, threads, and brokerd's audit files. No
role imports this module.

Each role is built as its `serve` builds it, from a configuration made here and
with I/O passed in: the role's own daemon class (`brokerd.serve.Brokerd`,
`loopd.serve.Loopd`, `memoryd.serve.Memoryd`), started and stopped as
`boxmaker.ipc.shell.serve_daemon` does, without the signals. Nothing of a
role's wiring is repeated here.

    start_brokerd / running_brokerd   a `Brokerd` with a real `AuditWriter` from
                                      `start_audit` (its file operations behind
                                      `FailingFiles`, which fails on demand), a
                                      `RecordingRuntime`, a `Clock`, and a grants
                                      directory whose next load can run a hook
                                      (`HookedGrantsDir`); `restart` stops it and
                                      starts another over the same home
    start_loopd / running_loopd       a `Loopd` over a given model (the scripted
                                      one, or the real one) on the home's loop.sock,
                                      its broker port on a given broker socket, or
                                      none, and its memory port on a given memory
                                      socket, or none
    running_memoryd                   a `Memoryd` over the home's memory files

Every path under a home comes from `boxmaker.core.home.layout.Home`. The real console
scripts as child processes are `boxmaker.testing.processes`.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ParamSpec, Protocol, TypeVar

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
from boxmaker.core.audit.records import AuditRecord
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.home.layout import Home
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import Dialect, from_format
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.envelope import Envelope, Message
from boxmaker.core.wire.loop import Turn
from boxmaker.loopd import config as loopd_config
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import Model
from boxmaker.loopd.serve import Loopd
from boxmaker.memoryd import config as memoryd_config
from boxmaker.memoryd.main import open_memory
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.serve import Memoryd
from boxmaker.memoryd.store import MemoryStore
from boxmaker.testing.homes import make_home, read_records
from boxmaker.testing.runtime import RecordingRuntime
from boxmaker.testing.sockets import OpenCall, exchange

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


# --- started, then stopped -----------------------------------------------------------


class Stoppable(Protocol):
    def stop(self) -> None: ...


D = TypeVar("D", bound=Stoppable)
P = ParamSpec("P")
GEMMA_DIALECT = from_format(GEMMA)  # the embedded model's, what a started loopd speaks unless told


def running(start: Callable[P, D]) -> Callable[P, AbstractContextManager[D]]:
    """`start` as a `with` block: what it started, stopped when the block ends."""

    @contextmanager
    def run(*args: P.args, **kwargs: P.kwargs) -> Iterator[D]:
        daemon = start(*args, **kwargs)
        try:
            yield daemon
        finally:
            daemon.stop()

    return run


@dataclass(kw_only=True)
class InProcess(ABC):
    """A daemon started in this process: `stop` stops it once, then removes the
    directories made for it."""

    _made: list[Path] = field(default_factory=list)
    _stopped: bool = False

    @abstractmethod
    def _end(self) -> None:
        """End the daemon (once: `_end_once`)."""

    def _end_once(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._end()

    def stop(self) -> None:
        self._end_once()
        for made in self._made:
            shutil.rmtree(made, ignore_errors=True)


# --- brokerd in this process -------------------------------------------------------


@dataclass
class InProcessBrokerd(InProcess):
    """A started `Brokerd`; `stop` (or leaving the `running_brokerd` block) ends it."""

    home: Path
    grants_dir: Path
    config: BrokerdConfig
    daemon: Brokerd
    runtime: RecordingRuntime
    files: FailingFiles
    grants: HookedGrantsDir
    clock: Callable[[], str]

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
        self._end_once()
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

    def _end(self) -> None:
        self.daemon.stop()


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
    daemon = Brokerd(config, started.writer, the_runtime, the_clock, caps, HookedGrantsDir)
    hooked = daemon.grants
    assert isinstance(hooked, HookedGrantsDir)
    daemon.start()
    return InProcessBrokerd(
        home, grants, config, daemon, the_runtime, files, hooked, the_clock, _made=made
    )


running_brokerd = running(start_brokerd)


# --- loopd in this process -----------------------------------------------------------


@dataclass
class InProcessLoopd(InProcess):
    """A serving loop.sock; `stop` (or leaving `running_loopd`) ends it."""

    home: Path
    model: Model
    daemon: Loopd

    @property
    def socket(self) -> Path:
        return self.daemon.path

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

    def _end(self) -> None:
        self.daemon.stop()


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
    dialect: Dialect = GEMMA_DIALECT,
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
    config = loopd_config.LoopdConfig(
        paths=loopd_config.PathsSection(home=str(home)),
        broker=loopd_config.BrokerSection(socket=_configured(broker_socket), timeout_ms=timeout_ms),
        memory=loopd_config.MemorySection(socket=_configured(memory_socket)),
    )
    daemon = Loopd(
        config,
        model,
        dialect,
        limits if limits is not None else TurnLimits(),
        f"in-process loopd, format {dialect.name}",
        clock=clock if clock is not None else _now,
    )
    daemon.start()
    return InProcessLoopd(home, model, daemon, _made=made)


def _configured(socket: Path | None) -> str:
    """A socket key of loopd.toml: the path, or "none"."""
    return "none" if socket is None else str(socket)


running_loopd = running(start_loopd)


# --- memoryd --------------------------------------------------------------------------


@contextmanager
def running_memoryd(
    home: Home, clock: Callable[[], datetime] = _now
) -> Iterator[tuple[MemoryStore, RecallIndex]]:
    """memoryd's three sockets served in this process for `home`, until the block ends;
    `clock` is its store's, and says when it started."""
    config = memoryd_config.MemorydConfig(paths=memoryd_config.PathsSection(home=str(home.root)))
    handlers = open_memory(config, clock)
    daemon = Memoryd(config, handlers, lambda: format_timestamp(clock()))
    daemon.start()
    try:
        yield handlers.store, handlers.recall
    finally:
        daemon.stop()
