"""The deny-reason table: every reason has the model's words, and its runbook entry exists.

`DenyReason` is the table (`core.grants.decisions`): the wire and audit name, what the
model reads (loopd), and the runbook entry the owner is sent to (bxctl chat).
The audit views decode the same members (`core.audit.views`). The words are
pinned where they are read: tests/loopd/test_turn.py (the model's, whole),
tests/bxctl (the chat lines); here, that the table is whole.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from boxmaker.bxctl.chat_lines import event_lines
from boxmaker.core.audit.views import DeniedView
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.loop import ToolDeniedEvent
from boxmaker.loopd.tools import denial_text

RUNBOOK = Path(__file__).resolve().parents[3] / "runbook.md"

# spec 000 section 9: the reasons a chat prints a runbook pointer for
POINTED = {
    DenyReason.GRANTS_INVALID: "grants-invalid",
    DenyReason.AUDIT_UNAVAILABLE: "audit-unavailable",
    DenyReason.STATE_UNREADABLE: "broker-state-damaged",
}


def _headings() -> set[str]:
    return {line[3:].strip() for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")}


def test_the_table_has_the_reference_s_ten_reasons_and_our_two() -> None:
    assert [r.value for r in DenyReason] == [
        "no_grant",
        "grant_expired",
        "taint_too_high",
        "denied_by_grant",
        "approval_refused",
        "approval_expired",
        "invalid_arguments",
        "grants_invalid",
        "audit_unavailable",
        "state_unreadable",
        "approval_stale",
        "untrusted_session",
    ]


@pytest.mark.parametrize("reason", list(DenyReason), ids=str)
def test_each_reason_has_its_texts_and_an_existing_runbook_entry(reason: DenyReason) -> None:
    assert DenyReason(reason.value) is reason
    assert reason.model_text.startswith("Denied: ")
    assert reason.model_text.endswith(".")
    assert "\n" not in reason.model_text
    assert denial_text(reason, None) == reason.model_text
    anchor = POINTED.get(reason)
    if anchor is None:
        assert reason.runbook is None
        assert len(event_lines(ToolDeniedEvent(name="shell", reason=reason))) == 1
    else:
        assert reason.runbook is Runbook(anchor)
        assert anchor in _headings()
        _, pointer = event_lines(ToolDeniedEvent(name="shell", reason=reason))
        assert pointer == Runbook(anchor).pointer


def test_the_model_texts_are_all_different() -> None:
    texts = [r.model_text for r in DenyReason]
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize("reason", list(DenyReason), ids=str)
def test_the_audit_views_decode_each_reason_of_the_table(reason: DenyReason) -> None:
    line = f'{{"outcome": "denied", "reason": "{reason.value}"}}'.encode()
    assert msgspec.json.decode(line, type=DeniedView).reason is reason


def test_the_audit_views_refuse_a_reason_the_table_has_not() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"outcome": "denied", "reason": "no_reason"}', type=DeniedView)
