"""What every socket answers or accepts: status, error, ok, and an approval's number.

No I/O; part of the wire (`core.wire.envelope`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from boxmaker.core.errors import ErrorCode
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp

ApprovalId = Annotated[int, Field(ge=0, le=2**64 - 1)]


class Ok(Strict):
    kind: Literal["ok"] = "ok"


class Status(Strict):
    """A cheap question: are you serving? (bxctl status, the tree's health checks)."""

    kind: Literal["status"] = "status"


class StatusReport(Strict):
    kind: Literal["status_report"] = "status_report"
    role: str
    version: str
    started: Timestamp
    detail: str  # one line, the role's own summary (brokerd: the audit head)


class Error(Strict):
    kind: Literal["error"] = "error"
    code: ErrorCode
    message: str
