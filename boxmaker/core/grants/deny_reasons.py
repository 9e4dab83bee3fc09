"""The deny-reason table: why a tool call was denied, and what each reason tells whom. Pure.

`DenyReason` is the table, one member a reason, in the reference's order (its
ten, then our two, approval_stale and untrusted_session). Each member is

    its value      the wire and audit name, never renamed
    model_text     what the model reads (loopd's `denial_text`; invalid_arguments
                   then carries the parser's detail: `...for this tool: <detail>`)
    runbook        the runbook entry the owner is sent to, for a reason that is a
                   fail-closed state the owner must repair; else None

The owner is shown the name itself (`bxctl chat` prints `[denied <tool>: <name>]`;
an approval's outcome reads `denied (<name>)`), then the entry's pointer on a line
of its own where there is one. Read by policy (`core.policy`, `core.grants.decisions`),
the audit views (`core.audit.views`, which decode these members), loopd
(`loopd.tools`) and bxctl (`bxctl.chat_cmd`). No pydantic here: the audit
verifier reads this module and must not load the wire models.
"""

from __future__ import annotations

from enum import StrEnum

from boxmaker.core.runbook import Runbook


class DenyReason(StrEnum):
    """Why a tool call was denied: a row of the table (the module docstring).

    A member is looked up by its name alone, `DenyReason("no_grant")`.
    """

    model_text: str
    runbook: Runbook | None

    def __new__(
        cls, value: str, model_text: str = "", runbook: Runbook | None = None
    ) -> DenyReason:
        # only the rows below call this with their texts (an enum's own lookup by
        # value never does): the defaults are there for that lookup's signature
        member = str.__new__(cls, value)
        member._value_ = value
        member.model_text = model_text
        member.runbook = runbook
        return member

    NO_GRANT = "no_grant", "Denied: no grant allows this call."
    GRANT_EXPIRED = "grant_expired", "Denied: the grant for this call has expired."
    TAINT_TOO_HIGH = (
        "taint_too_high",
        "Denied: this session has seen data too sensitive for this call.",
    )
    DENIED_BY_GRANT = "denied_by_grant", "Denied: a grant forbids this call."
    APPROVAL_REFUSED = "approval_refused", "Denied: the owner refused this call."
    APPROVAL_EXPIRED = (
        "approval_expired",
        "Denied: the approval request expired without an answer.",
    )
    INVALID_ARGUMENTS = (
        "invalid_arguments",
        "Denied: the arguments are not valid for this tool.",  # then `: <detail>`
    )
    GRANTS_INVALID = (
        "grants_invalid",
        "Denied: the grant files have an error; the owner has been told.",
        Runbook.GRANTS_INVALID,
    )
    AUDIT_UNAVAILABLE = (
        "audit_unavailable",
        "Denied: the audit log cannot be written; the owner has been told.",
        Runbook.AUDIT_UNAVAILABLE,
    )
    STATE_UNREADABLE = (
        "state_unreadable",
        "Denied: this session's broker state is damaged; the owner has been told.",
        Runbook.BROKER_STATE_DAMAGED,
    )
    # approved, but the re-decision is not the call the owner saw: another grant, a
    # changed grant file, or a higher taint (the approval's digest differs)
    APPROVAL_STALE = (
        "approval_stale",
        "Denied: the grant or the session changed before the owner approved; ask again.",
    )
    # the matched grant's `when_untrusted` is deny, and the session is untrusted
    UNTRUSTED_SESSION = (
        "untrusted_session",
        "Denied: this session has read untrusted content, and the grant forbids this call now.",
    )
