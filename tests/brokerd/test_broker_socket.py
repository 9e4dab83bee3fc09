"""broker.sock and admin.sock on the wire: forbidden kinds, denial details, bad frames.

brokerd runs in this process on real Unix sockets; the answers are read as raw
frames where the exact bytes matter (a `detail` field present or absent).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.policy import MAX_DETAIL
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.broker_admin import Approvals, Approve, CheckGrants, Refuse
from boxmaker.core.wire.envelope import Envelope, Message, encode_envelope
from boxmaker.core.wire.loop import Turn
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.sockets import exchange_raw

ADMIN_KINDS: list[Message] = [
    Approvals(),
    Approve(approval=0),
    Refuse(approval=0, reason="no"),
    CheckGrants(),
]


@pytest.fixture
def brokerd(tmp_path: Path) -> Iterator[InProcessBrokerd]:
    grants = tmp_path / "grants"
    write_grant(grants, "notes-read", tool="read_file", paths=[str(tmp_path / "notes")])
    with running_brokerd(tmp_path) as b:
        yield b


def raw(
    path: Path, message: Message, request_id: str = "r1"
) -> tuple[list[dict[str, object]], bool]:
    payload = encode_envelope(Envelope(id=request_id, final=True, message=message))
    frames, closed = exchange_raw(path, payload)
    return [orjson.loads(f) for f in frames], closed


# --- forbidden kinds ----------------------------------------------------------------


@pytest.mark.parametrize("message", ADMIN_KINDS, ids=lambda m: m.kind)
def test_every_admin_kind_is_forbidden_on_broker_sock(
    brokerd: InProcessBrokerd, message: Message, caplog: pytest.LogCaptureFixture
) -> None:
    frames, closed = raw(brokerd.broker_socket, message)
    assert len(frames) == 1
    assert frames[0]["id"] == "r1"
    assert frames[0]["final"] is True
    answer = frames[0]["message"]
    assert isinstance(answer, dict)
    assert answer["kind"] == "error"
    assert answer["code"] == "forbidden"
    assert closed
    assert brokerd.records() == []
    assert any(r.getMessage().endswith("see runbook.md#socket-forbidden") for r in caplog.records)


@pytest.mark.parametrize(
    "message",
    [
        ToolRequest(session="chat-1", call="c1", tool="read_file", arguments="{}"),
        Turn(session="chat-1", text="hello"),
    ],
    ids=lambda m: m.kind,
)
def test_what_is_not_an_admin_kind_is_forbidden_on_admin_sock(
    brokerd: InProcessBrokerd, message: Message
) -> None:
    frames, closed = raw(brokerd.admin_socket, message)
    assert [f["message"] for f in frames] == [
        {
            "kind": "error",
            "code": "forbidden",
            "message": f"{message.kind} is not accepted on admin.sock",
        }
    ]
    assert closed
    assert brokerd.records() == []
    assert brokerd.runtime.count == 0


def test_turn_is_forbidden_on_broker_sock(brokerd: InProcessBrokerd) -> None:
    frames, closed = raw(brokerd.broker_socket, Turn(session="chat-1", text="hi"))
    assert [f["message"] for f in frames] == [
        {"kind": "error", "code": "forbidden", "message": "turn is not accepted on broker.sock"}
    ]
    assert closed


def test_a_malformed_request_is_answered_malformed_and_closed(brokerd: InProcessBrokerd) -> None:
    frames, closed = exchange_raw(brokerd.broker_socket, b'{"id":"x","final":true}')
    assert len(frames) == 1
    assert orjson.loads(frames[0])["message"]["code"] == "malformed"
    assert closed
    assert brokerd.records() == []


def test_a_session_id_that_is_not_an_identifier_never_reaches_the_disk(
    brokerd: InProcessBrokerd,
) -> None:
    payload = orjson.dumps(
        {
            "id": "c1",
            "final": True,
            "message": {
                "kind": "tool_request",
                "session": "../../etc/x",
                "call": "c1",
                "tool": "read_file",
                "arguments": "{}",
            },
        }
    )
    frames, closed = exchange_raw(brokerd.broker_socket, payload)
    assert orjson.loads(frames[0])["message"]["code"] == "malformed"
    assert closed
    assert brokerd.records() == []
    assert not (brokerd.home / "broker").exists()


# --- denial details ------------------------------------------------------------------


def _unsafe(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.mark.parametrize(
    "arguments",
    [
        '{"file": "/x"}',
        "not json at all",
        "{" + '"' + "\\u001b[31m\\n\\r\\t\\u0007" + "f" * 2000 + '": 1}',
        '{"path": "relative/a.md"}',
        '{"path": "/a/../b"}',
        '{"path": "/a", "path": "/b"}',
        "[" * 5000,
    ],
    ids=[
        "unknown-field",
        "not-json",
        "long-field-with-controls",
        "relative",
        "dotdot",
        "dup",
        "deep",
    ],
)
def test_invalid_arguments_carry_a_one_line_detail(
    brokerd: InProcessBrokerd, arguments: str
) -> None:
    request = ToolRequest(session="chat-1", call="c1", tool="read_file", arguments=arguments)
    frames, _ = raw(brokerd.broker_socket, request, "c1")
    (answer,) = (f["message"] for f in frames)
    assert isinstance(answer, dict)
    assert answer["status"] == "denied"
    assert answer["reason"] == "invalid_arguments"
    detail = answer["detail"]
    assert isinstance(detail, str)
    assert detail
    assert len(detail) <= MAX_DETAIL
    assert "\n" not in detail
    assert _unsafe(detail) == []
    assert brokerd.runtime.count == 0


def _no_grant(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    return _read(tmp / "elsewhere" / "a")


def _unknown_tool(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    return ToolRequest(session="chat-1", call="c1", tool="rm_rf", arguments="not json")


def _denied_by_grant(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    write_grant(
        b.grants_dir, "keys-deny", tool="read_file", mode="deny", paths=[str(tmp / "notes" / "k")]
    )
    return _read(tmp / "notes" / "k" / "id")


def _grant_expired(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    write_grant(
        b.grants_dir,
        "old",
        tool="read_file",
        expires="2001-01-01T00:00:00.000Z",
        paths=[str(tmp / "old")],
    )
    return _read(tmp / "old" / "a")


def _taint_too_high(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    write_grant(
        b.grants_dir, "low", tool="read_file", max_taint="private", paths=[str(tmp / "low")]
    )
    state = b.home / "broker" / "sessions" / "chat-1.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(b'{"taint":"secret","untrusted":false}')
    return _read(tmp / "low" / "a")


def _grants_invalid(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    (b.grants_dir / "broken.toml").write_text('tool = "read_file"\nmode = "sometimes"\n')
    return _read(tmp / "notes" / "a")


def _state_unreadable(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    state = b.home / "broker" / "sessions" / "chat-1.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"{")
    return _read(tmp / "notes" / "a")


def _audit_unavailable(b: InProcessBrokerd, tmp: Path) -> ToolRequest:
    b.files.fail_now()
    return _read(tmp / "notes" / "a")


def _read(path: Path) -> ToolRequest:
    arguments = orjson.dumps({"path": str(path)}).decode()
    return ToolRequest(session="chat-1", call="c1", tool="read_file", arguments=arguments)


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (_no_grant, DenyReason.NO_GRANT),
        (_unknown_tool, DenyReason.NO_GRANT),
        (_denied_by_grant, DenyReason.DENIED_BY_GRANT),
        (_grant_expired, DenyReason.GRANT_EXPIRED),
        (_taint_too_high, DenyReason.TAINT_TOO_HIGH),
        (_grants_invalid, DenyReason.GRANTS_INVALID),
        (_state_unreadable, DenyReason.STATE_UNREADABLE),
        (_audit_unavailable, DenyReason.AUDIT_UNAVAILABLE),
    ],
    ids=lambda v: v.value if isinstance(v, DenyReason) else "",
)
def test_no_other_denial_carries_a_detail(
    brokerd: InProcessBrokerd,
    tmp_path: Path,
    setup: Callable[[InProcessBrokerd, Path], ToolRequest],
    reason: DenyReason,
) -> None:
    request = setup(brokerd, tmp_path)
    frames, closed = raw(brokerd.broker_socket, request, "c1")
    assert [f["message"] for f in frames] == [
        {"kind": "tool_response", "status": "denied", "reason": reason.value}
    ]
    assert closed
    assert brokerd.runtime.count == 0
