"""bxctl's requests to brokerd, loopd and memoryd, over the one client of `boxmaker.ipc.client`.

A failure to connect, a closed connection before the final answer, a timeout or
an `error` answer becomes a `CliError` with one line naming the socket and what
to do. Every socket is found under `BOXMAKER_HOME` (core.home.layout) unless an
option names it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

from boxmaker.bxctl.cli import CliError
from boxmaker.core.errors import (
    ErrorCode,
    NotAllowedError,
    RequestError,
    TimedOutError,
    UnreachableError,
)
from boxmaker.core.home.layout import Home, home_from
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Envelope, Message
from boxmaker.ipc.client import answers

TIMEOUT_S = 30.0


def home_dir() -> Path:
    return home_from(os.environ)


def default_admin_socket() -> Path:
    return Home(home_dir()).admin_socket


def default_loop_socket() -> Path:
    return Home(home_dir()).loop_socket


def default_memory_socket() -> Path:
    return Home(home_dir()).owner_memory_socket


BROKERD = ("brokerd", Runbook.BROKER_UNAVAILABLE.pointer)
LOOPD = ("loopd", Runbook.LOOPD_UNAVAILABLE.pointer)
MEMORYD = ("memoryd", Runbook.MEMORYD_UNAVAILABLE.pointer)


def stream(
    path: Path,
    message: Message,
    request_id: str,
    *,
    server: tuple[str, str] = BROKERD,
    timeout_s: float | None = TIMEOUT_S,
) -> Generator[Envelope, None, None]:
    """Each answer to `message` sent on `path` as it arrives, the final one last.

    `timeout_s` is a deadline for the whole exchange (None: none, for a turn that
    may wait on the owner)."""
    name, pointer = server
    try:
        yield from answers(path, message, request_id, timeout_s)
    except UnreachableError as exc:
        raise CliError(f"cannot reach {name} at {path} ({exc}): is it running? {pointer}") from exc
    except NotAllowedError as exc:
        raise CliError(f"not allowed to use {path}: run bxctl as the owner; {pointer}") from exc
    except TimedOutError as exc:
        raise CliError(f"{name} did not answer on {path} in time; {pointer}") from exc
    except RequestError as exc:
        raise CliError(f"the connection to {name} at {path} failed: {exc}; {pointer}") from exc


def request(path: Path, message: Message, request_id: str) -> list[Envelope]:
    """Every answer to `message` sent on brokerd's socket `path`, the final one last."""
    answers_ = list(stream(path, message, request_id))
    final = answers_[-1].message
    if isinstance(final, Error) and final.code is not ErrorCode.NO_SUCH_APPROVAL:
        raise CliError(f"brokerd refused the request: {final.code}: {final.message}")
    return answers_
