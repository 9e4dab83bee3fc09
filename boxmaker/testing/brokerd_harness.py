"""brokerd for tests: in-process on real sockets, or the real console script.

I/O: temporary directories, grant and config files, Unix sockets, and (for
`DaemonProcess`) a child process. No role imports this module.

    InProcessBrokerd   a `serve.Brokerd` on real Unix sockets, with a real
                       `AuditWriter` from `start_audit` (its file operations
                       behind `FailingFiles`, which fails on demand), a
                       `RecordingRuntime`, a clock, and a grants directory
                       whose next load can run a hook
    exchange           one request on a socket, every answer envelope back
    OpenCall           a request whose connection stays open (pending), then
                       is read to its end or dropped
    DaemonProcess      `brokerd serve --config` as a child process, waited for
                       until its sockets accept, stopped with SIGTERM

Nothing here sleeps to wait: `wait_until` polls a condition with a deadline.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from boxmaker.brokerd.audit_startup import Started, audit_files, start_audit
from boxmaker.brokerd.audit_writer import AuditFiles
from boxmaker.brokerd.config import (
    ApprovalsSection,
    BrokerdConfig,
    PathsSection,
    SocketsSection,
)
from boxmaker.brokerd.descriptors import DEFAULT_CAPS, ConnectionCaps
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.serve import Brokerd
from boxmaker.core.audit_records import AuditRecord, decode_record
from boxmaker.core.chain import ChainVerifier
from boxmaker.core.chain_report import ChainReport
from boxmaker.core.connection import ClientConnection
from boxmaker.core.frames import FrameDecoder
from boxmaker.core.grants import GrantSet
from boxmaker.core.messages import Envelope, Message, ToolRequest
from boxmaker.core.timestamps import format_timestamp
from boxmaker.testing.runtime import RecordingRuntime

SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep clear of it
BROKER_SOCKET = Path("run") / "loop-broker" / "broker.sock"
ADMIN_SOCKET = Path("run") / "owner-broker" / "admin.sock"


# --- waiting -----------------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "the condition"
) -> None:
    """Return once `condition()` is true; TimeoutError after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s} s")
        time.sleep(delay)  # a poll interval, not a wait for something to happen
        delay = min(delay * 2, 0.05)


# --- homes, grants, configuration --------------------------------------------------


def make_home(base: Path) -> Path:
    """A fresh home directory under `base`, or under a short temporary directory
    if `base` is too deep for a socket path (the caller removes what it made)."""
    home = base / "home"
    if len(str(home / ADMIN_SOCKET)) > SOCKET_PATH_MAX:
        home = Path(tempfile.mkdtemp(prefix="bx-")) / "home"
    home.mkdir(parents=True)
    return home


def write_grant(
    directory: Path,
    grant_id: str,
    *,
    tool: str,
    mode: str = "auto",
    max_taint: str = "secret",
    result_class: str = "private",
    untrusted: bool = False,
    expires: str | None = None,
    paths: Sequence[str] = (),
    hosts: Sequence[str] = (),
) -> Path:
    """Write `<directory>/<grant_id>.toml` and return its path."""
    lines = [
        f'tool = "{tool}"',
        f'mode = "{mode}"',
        f'max_taint = "{max_taint}"',
        f'result_class = "{result_class}"',
        f"untrusted = {'true' if untrusted else 'false'}",
    ]
    if expires is not None:
        lines.append(f'expires = "{expires}"')
    lines.append("[constraints]")
    if paths:
        lines.append("paths = [" + ", ".join(f'"{p}"' for p in paths) + "]")
    if hosts:
        lines.append("hosts = [" + ", ".join(f'"{h}"' for h in hosts) + "]")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{grant_id}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_config(
    path: Path,
    home: Path,
    grants: Path,
    *,
    ttl_ms: int | None = None,
    broker: Path | None = None,
    admin: Path | None = None,
    backend: str = "refusing",
) -> Path:
    """A brokerd.toml naming `home` and `grants` (and what else is given)."""
    lines = ["[paths]", f'home = "{home}"', f'grants = "{grants}"']
    if broker is not None or admin is not None:
        lines.append("[sockets]")
        if broker is not None:
            lines.append(f'broker = "{broker}"')
        if admin is not None:
            lines.append(f'admin = "{admin}"')
    if ttl_ms is not None:
        lines += ["[approvals]", f"ttl_ms = {ttl_ms}"]
    lines += ["[runner]", f'backend = "{backend}"']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_records(home: Path) -> list[AuditRecord]:
    """Every record of `<home>/audit/`, in order (every line must parse)."""
    audit = home / "audit"
    records: list[AuditRecord] = []
    for name in audit_files(audit):
        for line in (audit / name).read_bytes().splitlines():
            records.append(decode_record(line))
    return records


def verify_log(home: Path) -> ChainReport:
    """`ChainVerifier` over every file of `<home>/audit/`."""
    audit = home / "audit"
    verifier = ChainVerifier()
    for name in audit_files(audit):
        verifier.feed(name, (audit / name).read_bytes())
    return verifier.finish()


# --- seams ------------------------------------------------------------------------


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


# --- clients ----------------------------------------------------------------------


def _connect(path: Path, timeout_s: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def exchange(
    path: Path, message: Message, request_id: str = "t1", timeout_s: float = 10.0
) -> list[Envelope]:
    """Send `message` on the socket at `path`; every answer envelope, the final one last."""
    conn = ClientConnection(request_id)
    answers: list[Envelope] = []
    with _connect(path, timeout_s) as sock:
        sock.sendall(conn.request(message))
        while not conn.done:
            answers.extend(conn.receive(sock.recv(65536)))
    return answers


def exchange_raw(path: Path, payload: bytes, timeout_s: float = 10.0) -> tuple[list[bytes], bool]:
    """Send `payload` as one frame; the answer frames' bytes, and whether the server
    then closed the connection (read to end of stream)."""
    decoder = FrameDecoder()
    frames: list[bytes] = []
    with _connect(path, timeout_s) as sock:
        sock.sendall(len(payload).to_bytes(4, "big") + payload)
        while True:
            data = sock.recv(65536)
            if not data:
                return frames, True
            frames.extend(decoder.feed(data))


def accepts(path: Path) -> bool:
    """True if a connection to the socket at `path` is accepted now."""
    try:
        with _connect(path, 1.0):
            return True
    except OSError:
        return False


class OpenCall:
    """A tool_request whose connection the test holds: read answers as they come, or drop it."""

    def __init__(self, path: Path, request: ToolRequest, timeout_s: float = 10.0) -> None:
        self.request = request
        self.answers: list[Envelope] = []
        self._conn = ClientConnection(request.call)
        self._sock: socket.socket | None = _connect(path, timeout_s)
        self._sock.sendall(self._conn.request(request))

    @property
    def done(self) -> bool:
        return self._conn.done

    def _read_once(self) -> None:
        if self._sock is None:
            raise RuntimeError("the call was dropped")
        self.answers.extend(self._conn.receive(self._sock.recv(65536)))

    def first(self) -> Envelope:
        """The first answer (for an ask: the pending_approval frame)."""
        while not self.answers:
            self._read_once()
        return self.answers[0]

    def final(self, timeout_s: float = 10.0) -> Envelope:
        """Read to the final answer (waiting at most `timeout_s` for each read)."""
        if self._sock is None:
            raise RuntimeError("the call was dropped")
        self._sock.settimeout(timeout_s)
        while not self._conn.done:
            self._read_once()
        return self.answers[-1]

    def drop(self) -> None:
        """Close the connection, as a requester that went away."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> OpenCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()


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

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.daemon.stop()
        for made in self._made:
            shutil.rmtree(made, ignore_errors=True)


def start_brokerd(
    base: Path,
    *,
    grants_dir: Path | None = None,
    ttl_ms: int = 900_000,
    runtime: RecordingRuntime | None = None,
    clock: Callable[[], str] | None = None,
    caps: ConnectionCaps = DEFAULT_CAPS,
) -> InProcessBrokerd:
    """Start brokerd's sockets and threads in this process, with a home under `base`."""
    home = make_home(base)
    made = [] if home.parent == base else [home.parent]
    grants = grants_dir if grants_dir is not None else base / "grants"
    grants.mkdir(parents=True, exist_ok=True)
    config = BrokerdConfig(
        paths=PathsSection(home=str(home), grants=str(grants)),
        sockets=SocketsSection(),
        approvals=ApprovalsSection(ttl_ms=ttl_ms),
    )
    the_clock = clock if clock is not None else Clock()
    files = FailingFiles()
    started = start_audit(home / "audit", the_clock(), files=files)
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
) -> Iterator[InProcessBrokerd]:
    brokerd = start_brokerd(
        base, grants_dir=grants_dir, ttl_ms=ttl_ms, runtime=runtime, clock=clock, caps=caps
    )
    try:
        yield brokerd
    finally:
        brokerd.stop()


# --- the real console script ----------------------------------------------------------


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
    """`brokerd serve --config PATH` as a child process, its stderr collected as it comes.

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
    ) -> None:
        self.config = config
        self.stopped_cleanly: bool | None = None  # set by stop()
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [*console_script("brokerd"), "serve", "--config", str(config), *args],
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
        """Everything brokerd has written so far (stdout and stderr together)."""
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float = 10.0) -> str:
        """The first line of brokerd's output for which `predicate` holds, waiting for it."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [line for line in self.stderr_lines() if predicate(line)]
            return bool(found)

        wait_until(seen, timeout_s, "a matching line from brokerd")
        return found[0]

    def wait_serving(self, sockets: Sequence[Path], timeout_s: float = 30.0) -> None:
        """Until every socket in `sockets` accepts; RuntimeError if the process ends first."""

        def ready() -> bool:
            if self.process.poll() is not None:
                self._reader.join(5)
                raise RuntimeError(f"brokerd exited with {self.process.returncode}:\n{self.stderr}")
            return all(accepts(path) for path in sockets)

        wait_until(ready, timeout_s, "brokerd accepting connections")

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        """The exit status of a brokerd that stops by itself (refused to start)."""
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
