"""The wire and audit shape of a decision's outcome, and the deny reasons. No I/O.

    {"outcome": "allowed"} | {"outcome": "ask", "why"?} | {"outcome": "denied", "reason": R}

`why` is `"untrusted"` on an ask that a grant's `when_untrusted` made of what
would otherwise have run (the session had read untrusted content), and absent
(`null` in an audit line) on any other ask.

`allowed` and `ask` are models with no fields but their tag, and refuse unknown
fields like every other model, so `{"outcome": "allowed", "x": 1}` does not parse.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class DenyReason(StrEnum):
    """Why a tool call was denied. Values are wire and audit names, never renamed."""

    NO_GRANT = "no_grant"
    GRANT_EXPIRED = "grant_expired"
    TAINT_TOO_HIGH = "taint_too_high"
    DENIED_BY_GRANT = "denied_by_grant"
    APPROVAL_REFUSED = "approval_refused"
    APPROVAL_EXPIRED = "approval_expired"
    INVALID_ARGUMENTS = "invalid_arguments"
    GRANTS_INVALID = "grants_invalid"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    STATE_UNREADABLE = "state_unreadable"
    # approved, but the re-decision is not the call the owner saw: another grant, a
    # changed grant file, or a higher taint (the approval's digest differs)
    APPROVAL_STALE = "approval_stale"
    # the matched grant's `when_untrusted` is deny, and the session is untrusted
    UNTRUSTED_SESSION = "untrusted_session"


class Strict(BaseModel):
    """Base of every wire and audit model: unknown fields refused, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class AllowedRecord(Strict):
    outcome: Literal["allowed"] = "allowed"


class AskRecord(Strict):
    outcome: Literal["ask"] = "ask"
    why: Literal["untrusted"] | None = None  # the session is untrusted (`when_untrusted`)


class DeniedRecord(Strict):
    outcome: Literal["denied"] = "denied"
    reason: DenyReason


DecisionRecord = Annotated[AllowedRecord | AskRecord | DeniedRecord, Field(discriminator="outcome")]
