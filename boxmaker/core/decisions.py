"""The wire and audit shape of a decision's outcome, and the ten deny reasons. No I/O.

    {"outcome": "allowed"} | {"outcome": "ask"} | {"outcome": "denied", "reason": R}

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


class Strict(BaseModel):
    """Base of every wire and audit model: unknown fields refused, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class AllowedRecord(Strict):
    outcome: Literal["allowed"] = "allowed"


class AskRecord(Strict):
    outcome: Literal["ask"] = "ask"


class DeniedRecord(Strict):
    outcome: Literal["denied"] = "denied"
    reason: DenyReason


DecisionRecord = Annotated[AllowedRecord | AskRecord | DeniedRecord, Field(discriminator="outcome")]
