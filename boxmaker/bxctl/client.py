"""bxctl's one socket client: send one request, read its answers. Blocking I/O.

A failure to connect, a closed connection before the final answer, a timeout or
an `error` answer becomes a `CliError` with one line naming the socket and what
to do.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

from boxmaker.bxctl.cli import CliError
from boxmaker.core.connection import ClientConnection
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.messages import Envelope, Error, Message

DEFAULT_HOME = "/var/lib/boxmaker"
TIMEOUT_S = 30.0


def home_dir() -> Path:
    return Path(os.environ.get("BOXMAKER_HOME") or DEFAULT_HOME)


def default_admin_socket() -> Path:
    return home_dir() / "run" / "owner-broker" / "admin.sock"


def default_loop_socket() -> Path:
    return home_dir() / "run" / "loop" / "loop.sock"


BROKERD = ("brokerd", "see runbook.md#broker-unavailable")
LOOPD = ("loopd", "see runbook.md#loopd-unavailable")


def stream(
    path: Path,
    message: Message,
    request_id: str,
    *,
    server: tuple[str, str] = BROKERD,
    timeout_s: float | None = TIMEOUT_S,
) -> Iterator[Envelope]:
    """Each answer to `message` sent on `path` as it arrives, the final one last."""
    name, pointer = server
    conn = ClientConnection(request_id)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(str(path))
            sock.sendall(conn.request(message))
            sock.settimeout(timeout_s)
            while not conn.done:
                yield from conn.receive(sock.recv(65536))
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise CliError(
            f"cannot reach {name} at {path} ({exc.strerror}): is it running? {pointer}"
        ) from exc
    except PermissionError as exc:
        raise CliError(f"not allowed to use {path}: run bxctl as the owner; {pointer}") from exc
    except TimeoutError as exc:
        raise CliError(f"{name} did not answer on {path} in time; {pointer}") from exc
    except (OSError, ProtocolError) as exc:
        raise CliError(f"the connection to {name} at {path} failed: {exc}; {pointer}") from exc


def request(path: Path, message: Message, request_id: str) -> list[Envelope]:
    """Every answer to `message` sent on brokerd's socket `path`, the final one last."""
    answers = list(stream(path, message, request_id))
    final = answers[-1].message
    if isinstance(final, Error) and final.code is not ErrorCode.NO_SUCH_APPROVAL:
        raise CliError(f"brokerd refused the request: {final.code}: {final.message}")
    return answers
