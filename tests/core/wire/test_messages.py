"""Envelope decoding refuses everything design.md section 3 says it must, as malformed."""

from __future__ import annotations

import re

import pytest

from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.wire import envelope
from boxmaker.core.wire.envelope import decode_envelope

OK_TURN = b'{"id":"t1","final":true,"message":{"kind":"turn","session":"chat-1","text":"hi"}}'


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"id":"t1","final":true}',
        b'{"id":"t1","final":true,"message":{"kind":"nope"}}',
        b'{"id":"t1","final":true,"message":{"kind":"ok","extra":1}}',
        b'{"id":"t1","final":true,"message":{"kind":"ok"},"extra":1}',
        b'{"id":"t1","final":"yes","message":{"kind":"ok"}}',
        b'{"id":"t1","final":true,"message":{"kind":"approve","approval":"41"}}',
        b'{"id":"t1","final":true,"message":{"kind":"approve","approval":-1}}',
        b'{"id":"t1","final":true,"message":{"kind":"approve","approval":18446744073709551616}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"../etc","text":"x"}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":".hidden","text":"x"}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"a/b","text":"x"}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"","text":"x"}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"'
        + b"a" * 129
        + b'","text":"x"}}',
        b'{"id":"t/1","final":true,"message":{"kind":"ok"}}',
        b'{"id":"t1","final":true,"message":{"kind":"tool_response","status":"maybe"}}',
        b'{"id":"t1","final":true,"message":{"kind":"tool_response","status":"pending_approval","approval":1,"expires":"2026-11-30T12:15:00Z"}}',
        b'{"id":"t1","final":true,"message":{"kind":"tool_response","status":"pending_approval","approval":1,"expires":"2026-13-30T12:15:00.000Z"}}',
        b'{"id":"t1","final":true,"message":{"kind":"tool_response","status":"denied","reason":"because"}}',
        b'{"id":"t1","final":true,"message":{"kind":"tool_response","status":"result","content":"x","class":"top","untrusted":false,"truncated":false}}',
        b'{"id":"t1","final":true,"message":{"kind":"approve_result","outcome":{"outcome":"allowed","x":1}}}',
        b'{"id":"t1","final":true,"message":{"kind":"approve_result","outcome":{"outcome":"approved"}}}',
        b'{"id":"t1","final":true,"message":{"kind":"turn_event","event":{"type":"telepathy"}}}',
        b"[" * 100_000,
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"a","text":"\\ud800"}}',
    ],
    ids=[
        "not-json",
        "not-utf8",
        "not-an-object",
        "no-message",
        "unknown-kind",
        "unknown-field-in-message",
        "unknown-field-in-envelope",
        "final-not-bool",
        "approval-as-string",
        "approval-negative",
        "approval-over-u64",
        "session-dotdot",
        "session-hidden",
        "session-slash",
        "session-empty",
        "session-too-long",
        "id-with-slash",
        "unknown-status",
        "timestamp-without-millis",
        "timestamp-month-13",
        "unknown-deny-reason",
        "unknown-data-class",
        "empty-outcome-with-field",
        "unknown-outcome",
        "unknown-event-type",
        "nested-too-deep",
        "lone-surrogate",
    ],
)
def test_refused_as_malformed(payload: bytes) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_envelope(payload)
    assert caught.value.code is ErrorCode.MALFORMED
    assert "\n" not in caught.value.message


def test_a_good_envelope_decodes() -> None:
    envelope = decode_envelope(OK_TURN)
    assert envelope.message.kind == "turn"
    assert envelope.final is True


def test_identifier_edges() -> None:
    longest = b"a" * 128
    payload = (
        b'{"id":"t1","final":true,"message":{"kind":"turn","session":"'
        + longest
        + b'","text":"x"}}'
    )
    assert decode_envelope(payload).message.session == longest.decode()  # type: ignore[union-attr]
    dotted = b'{"id":"t1","final":true,"message":{"kind":"turn","session":"a.b:c_d-e","text":"x"}}'
    assert decode_envelope(dotted).message.session == "a.b:c_d-e"  # type: ignore[union-attr]


def test_each_union_tag_is_its_members_kind() -> None:
    # the union is the one list of kinds: a member whose tag is not its own kind would
    # decode as another's
    kinds = envelope.message_kinds()
    assert len(kinds) == len(set(kinds))
    for tag in kinds:
        cls = envelope._KINDS[tag]
        kind = cls.model_fields["kind"].default
        status = cls.model_fields.get("status")
        assert tag == (kind if status is None else f"{kind}:{status.default}")


def test_the_docstring_table_names_every_kind_once_the_union_knows() -> None:
    table = (envelope.__doc__ or "").split("request                                  answers")[1]
    rows = [line.split(None, 1) for line in table.split("\n\n")[0].strip().splitlines()]
    named = set()
    for row in rows:
        for column in row:
            named |= set(re.findall(r"[a-z_]+", column)) - {"then", "any"}
    kinds = {tag.split(":")[0] for tag in envelope.message_kinds()}
    assert named == kinds
