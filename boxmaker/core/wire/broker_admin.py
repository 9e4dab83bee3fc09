"""brokerd's admin.sock messages: approvals, grants, the audit checkpoint, session states.

No I/O; part of the wire (`core.wire.envelope`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from boxmaker.core.audit.records import Hash32, Seq
from boxmaker.core.grants.decisions import DecisionRecord
from boxmaker.core.grants.model import GrantProblem
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp
from boxmaker.core.wire.common import ApprovalId


class UntrustedBy(Strict):
    """The call whose result first made a session untrusted (brokerd's session state),
    and the flag rule its content matched when that, not its grant, made it untrusted."""

    session: SessionId
    call: CallId
    tool: str
    rule: str | None = None


# a digest's prefix, as the owner types it (`bxctl approve N --digest D`)
DigestPrefix = Annotated[str, Field(pattern=r"^[0-9a-f]{12,64}$")]


class PendingApproval(Strict):
    """One call waiting for the owner, as brokerd describes it (never loopd)."""

    approval: ApprovalId
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # the parsed arguments serialised again, not the raw text
    grant: str
    taint: DataClass
    created: Timestamp
    expires: Timestamp
    digest: Hash32  # what approving it binds to (`core.policy`, "What an approval is bound to")
    untrusted_by: UntrustedBy | None = None  # the session is untrusted: since this call


class Approvals(Strict):
    kind: Literal["approvals"] = "approvals"


class ApprovalList(Strict):
    kind: Literal["approval_list"] = "approval_list"
    items: tuple[PendingApproval, ...]


class Approve(Strict):
    kind: Literal["approve"] = "approve"
    approval: ApprovalId
    digest: DigestPrefix | None = None  # approve only if the approval's digest starts so


class ApproveResult(Strict):
    kind: Literal["approve_result"] = "approve_result"
    outcome: DecisionRecord


class Refuse(Strict):
    kind: Literal["refuse"] = "refuse"
    approval: ApprovalId
    reason: str | None = None


class CheckGrants(Strict):
    kind: Literal["check_grants"] = "check_grants"


class GrantsReport(Strict):
    kind: Literal["grants_report"] = "grants_report"
    problems: tuple[GrantProblem, ...]


class AuditCheckpoint(Strict):
    """Pin the audit log's head now (`bxctl audit checkpoint`; core.audit.checkpoints)."""

    kind: Literal["checkpoint"] = "checkpoint"


class CheckpointReply(Strict):
    kind: Literal["checkpoint_reply"] = "checkpoint_reply"
    seq: Seq  # the last record's seq
    head: Hash32  # the sha256 of its line
    time: Timestamp  # when brokerd took the checkpoint


class SessionStates(Strict):
    """Every session brokerd keeps state for (`bxctl sessions`)."""

    kind: Literal["session_states"] = "session_states"


class SessionStateItem(Strict):
    session: SessionId
    taint: DataClass
    untrusted: bool
    untrusted_by: UntrustedBy | None = None


class SessionStateList(Strict):
    kind: Literal["session_state_list"] = "session_state_list"
    items: tuple[SessionStateItem, ...]
