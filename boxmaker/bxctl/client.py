"""bxctl's one socket client: send one request, read its answers. Blocking I/O.

A failure to connect, a closed connection before the final answer, a timeout or
an `error` answer becomes a `CliError` with one line naming the socket and what
to do.
"""

from __future__ import annotations

import os
import socket
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


def request(path: Path, message: Message, request_id: str) -> list[Envelope]:
    """Every answer to `message` sent on `path`, the final one last."""
    conn = ClientConnection(request_id)
    answers: list[Envelope] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(str(path))
            sock.sendall(conn.request(message))
            while not conn.done:
                answers.extend(conn.receive(sock.recv(65536)))
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise CliError(
            f"cannot reach brokerd at {path} ({exc.strerror}): is it running? "
            "see runbook.md#broker-unavailable"
        ) from exc
    except PermissionError as exc:
        raise CliError(
            f"not allowed to use {path}: run bxctl as the owner; see runbook.md#broker-unavailable"
        ) from exc
    except TimeoutError as exc:
        raise CliError(f"brokerd did not answer on {path} within {TIMEOUT_S:.0f} s") from exc
    except (OSError, ProtocolError) as exc:
        raise CliError(f"the connection to {path} failed: {exc}") from exc
    final = answers[-1].message
    if isinstance(final, Error) and final.code is not ErrorCode.NO_SUCH_APPROVAL:
        raise CliError(f"brokerd refused the request: {final.code}: {final.message}")
    return answers
