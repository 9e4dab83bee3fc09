"""`session_states` on admin.sock: every session brokerd keeps state for, as it decides
with it; an unreadable file fails closed, and spoils no other session.

brokerd runs in this process on real sockets (`running_brokerd`); the states are
written by brokerd itself (an untrusted read) or by its own `SessionStore`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.admin import page_states
from boxmaker.brokerd.session_state import SessionStore, StateUnreadableError
from boxmaker.core.errors import ErrorCode
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import SessionState
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.core.wire.broker_admin import (
    SessionStateItem,
    SessionStateList,
    SessionStates,
    UntrustedBy,
)
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Envelope, encode_envelope
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant


def states(brokerd: InProcessBrokerd) -> list[SessionStateItem]:
    answers = brokerd.admin(SessionStates(), "a6")
    assert answers[-1].final
    items: list[SessionStateItem] = []
    for answer in answers:
        assert isinstance(answer.message, SessionStateList)
        items.extend(answer.message.items)
    return items


def test_each_session_is_listed_with_its_taint_and_trust(tmp_path: Path) -> None:
    web = tmp_path / "web"
    write_grant(tmp_path / "grants", "web-read", tool="read_file", untrusted=True, paths=[str(web)])
    with running_brokerd(tmp_path) as brokerd:
        arguments = orjson.dumps({"path": str(web / "page")}).decode()
        read = ToolRequest(session="chat-2", call="r1", tool="read_file", arguments=arguments)
        assert isinstance(brokerd.tool(read, "r1")[-1].message, ResultResponse)
        SessionStore(brokerd.home).write("chat-1", SessionState(DataClass.SECRET, False))
        items = states(brokerd)
    assert items == [
        SessionStateItem(session="chat-1", taint=DataClass.SECRET, untrusted=False),
        SessionStateItem(
            session="chat-2",
            taint=DataClass.PRIVATE,
            untrusted=True,
            untrusted_by=UntrustedBy(session="chat-2", call="r1", tool="read_file"),
        ),
    ]


def test_no_session_yet_is_an_empty_list(tmp_path: Path) -> None:
    with running_brokerd(tmp_path) as brokerd:
        answers = brokerd.admin(SessionStates(), "a6")
    assert [(a.final, a.message) for a in answers] == [(True, SessionStateList(items=()))]


def test_an_unreadable_state_fails_closed_and_the_others_are_listed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_brokerd(tmp_path) as brokerd:
        store = SessionStore(brokerd.home)
        store.write("good", SessionState(DataClass.PRIVATE, False))
        (store.directory / "bad.json").write_bytes(b'{"taint":"public","untrusted":false}')
        (store.directory / "good.json.tmp").write_bytes(b"left by a crash")
        (store.directory / ".x.json").write_bytes(b"{}")
        caplog.set_level(logging.ERROR)
        items = states(brokerd)
    assert items == [
        SessionStateItem(session="bad", taint=DataClass.SECRET, untrusted=True),
        SessionStateItem(session="good", taint=DataClass.PRIVATE, untrusted=False),
    ]
    (line,) = [r.getMessage() for r in caplog.records if "state_unreadable" in r.getMessage()]
    assert "bad.json: says public" in line
    assert line.endswith("see runbook.md#broker-state-damaged")


def test_a_state_directory_that_cannot_be_listed_is_unavailable(tmp_path: Path) -> None:
    with running_brokerd(tmp_path) as brokerd:
        directory = SessionStore(brokerd.home).directory
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.write_bytes(b"a file where the directory should be")
        (answer,) = brokerd.admin(SessionStates(), "a6")
    assert isinstance(answer.message, Error)
    assert answer.message.code is ErrorCode.UNAVAILABLE
    assert answer.message.message.endswith("see runbook.md#broker-state-damaged")


def test_the_store_lists_states_and_errors_by_id(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.write("b", SessionState(DataClass.PRIVATE, True))
    store.write("a", SessionState(DataClass.SECRET, False))
    (store.directory / "c.json").write_bytes(b"not json")
    found = store.states()
    assert [session for session, _ in found] == ["a", "b", "c"]
    assert found[0][1] == SessionState(DataClass.SECRET, False)
    assert found[1][1] == SessionState(DataClass.PRIVATE, True)
    assert isinstance(found[2][1], StateUnreadableError)


def test_many_sessions_are_sent_in_pages_that_fit() -> None:
    items = [
        SessionStateItem(session=f"s-{n:05d}", taint=DataClass.PRIVATE, untrusted=False)
        for n in range(100)
    ]
    pages = page_states(items, "a6", budget=1_000)
    assert len(pages) > 1
    assert [i for page in pages for i in page] == items
    sizes = [
        len(encode_envelope(Envelope(id="a6", final=False, message=SessionStateList(items=page))))
        for page in pages
    ]
    assert all(size <= 1_000 for size in sizes)
    assert max(sizes) > 800  # full pages, not one item each
