"""gateway.sock's messages: brokerd posts an approval, gatewayd answers with the
owner's reply, brokerd tells how it was settled.

No I/O; part of the wire (`core.wire.envelope`).

On gateway.sock (served by gatewayd, brokerd the client; docs/gatewayd.md, "The
wire") a Mattermost id (`by`, `post`) is exactly 26 characters of [a-z0-9], and
the owner's `reason` is at most MAX_REASON_CHARS characters with no control or
line-break character (categories Cc, Zl, Zp).
"""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator

from boxmaker.core.audit.records import ApprovalAnswer, Hash32
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp
from boxmaker.core.wire.broker_admin import (
    PendingApproval,
    UntrustedBy,
)
from boxmaker.core.wire.common import ApprovalId

MATTERMOST_ID_CHARS = 26
MAX_REASON_CHARS = 1000
MAX_OUTCOME_CHARS = 200
BY_BXCTL = "bxctl"  # who answered, when the owner used bxctl (audit `by`)
_LINE_BREAKING = frozenset({"Cc", "Zl", "Zp"})


def is_mattermost_id(text: str) -> bool:
    """True for exactly 26 characters of [a-z0-9] (a Mattermost user, post or channel id)."""
    return len(text) == MATTERMOST_ID_CHARS and all(
        c in "abcdefghijklmnopqrstuvwxyz0123456789" for c in text
    )


def check_mattermost_id(text: str) -> str:
    if not is_mattermost_id(text):
        raise ValueError("a Mattermost id is exactly 26 characters of a-z 0-9")
    return text


def check_one_line(text: str, limit: int) -> str:
    """`text` if it is 1 to `limit` characters with no control or line-break character."""
    if not 1 <= len(text) <= limit:
        raise ValueError(f"must be 1 to {limit} characters")
    if any(unicodedata.category(char) in _LINE_BREAKING for char in text):
        raise ValueError("must not contain a control or line-break character")
    return text


def check_reason(text: str) -> str:
    return check_one_line(text, MAX_REASON_CHARS)


def check_outcome(text: str) -> str:
    return check_one_line(text, MAX_OUTCOME_CHARS)


def check_outcome_by(text: str) -> str:
    if text != BY_BXCTL and not is_mattermost_id(text):
        raise ValueError("by is bxctl or a Mattermost user id (26 characters of a-z 0-9)")
    return text


MattermostId = Annotated[str, AfterValidator(check_mattermost_id)]
Reason = Annotated[str, AfterValidator(check_reason)]
OutcomeBy = Annotated[str, AfterValidator(check_outcome_by)]
Outcome = Annotated[str, AfterValidator(check_outcome)]


class ReplyAnswer(StrEnum):
    """What the owner answered in chat. Values are never renamed."""

    APPROVE = "approve"
    REFUSE = "refuse"


class ApprovalRequest(Strict):
    """brokerd: post this approval (the fields of its `PendingApproval`, never model text)."""

    kind: Literal["approval_request"] = "approval_request"
    approval: ApprovalId
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # the parsed arguments serialised again, not the raw text
    grant: str
    taint: DataClass
    created: Timestamp
    expires: Timestamp
    digest: Hash32
    untrusted_by: UntrustedBy | None = None

    @classmethod
    def of(cls, item: PendingApproval) -> ApprovalRequest:
        return cls.model_validate(item.model_dump())

    def item(self) -> PendingApproval:
        return PendingApproval.model_validate(self.model_dump(exclude={"kind"}))


class ApprovalPosted(Strict):
    """gatewayd (not final): the approval's post exists, with this id."""

    kind: Literal["approval_posted"] = "approval_posted"
    approval: ApprovalId
    post: MattermostId


class ApprovalReply(Strict):
    """gatewayd (final): the owner answered the post in chat."""

    kind: Literal["approval_reply"] = "approval_reply"
    approval: ApprovalId
    answer: ReplyAnswer
    by: MattermostId  # the owner's Mattermost user id
    post: MattermostId  # the approval's post (as in `approval_posted`)
    reason: Reason | None = None  # the owner's words after `refuse <id>`; absent: none


class ApprovalOutcome(Strict):
    """brokerd: how a posted approval was settled, whoever settled it (answered `ok`)."""

    kind: Literal["approval_outcome"] = "approval_outcome"
    approval: ApprovalId
    answer: ApprovalAnswer
    by: OutcomeBy | None = None  # bxctl, the owner's user id, or absent (expired, abandoned)
    outcome: Outcome  # one line: `runs`, `denied (approval_refused)`
