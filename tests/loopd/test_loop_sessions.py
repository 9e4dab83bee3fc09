"""loop.sock's owner kinds through real Unix sockets: `sessions`, `session_show` and
`compact`, with loopd in this process (the turn loop over the scripted model and the
real LoopServer), as in test_loop_socket.py.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.core.errors import ErrorCode
from boxmaker.core.labels import DataClass
from boxmaker.core.model.compaction_plan import MEMORY_CHANCE, SUMMARY_INSTRUCTION
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import decode_envelope
from boxmaker.core.wire.frames import MAX_FRAME
from boxmaker.core.wire.loop import (
    Compact,
    ContextCompactedEvent,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    SessionSummary,
    ShownEntry,
    TurnDone,
    TurnEvent,
)
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs, ToolEntry, UserEntry
from boxmaker.testing.daemons import InProcessLoopd, running_loopd
from boxmaker.testing.homes import make_home
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import exchange, exchange_raw

KIB = 1024
# tokens are characters (the scripted model): three turns pass 85% of 3,000
COMPACTING = TurnLimits(
    stream_interval_s=0, context=3_000, compact_at=0.85, summary_tokens=200, keep_turns=1
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


def reply(prompt: str) -> str:
    """The scripted model: a summary when asked for one, nothing to save when offered."""
    last = prompt.rsplit("<start_of_turn>user", 1)[-1]
    if SUMMARY_INSTRUCTION in last:
        return "Summary: the owner sent three messages."
    if MEMORY_CHANCE in last:
        return "nothing to save"
    return "Noted."


def listed(loopd: InProcessLoopd) -> list[SessionSummary]:
    answers = exchange(loopd.socket, Sessions(), "v1")
    assert answers[-1].final
    items: list[SessionSummary] = []
    for answer in answers:
        assert isinstance(answer.message, SessionList)
        items.extend(answer.message.items)
    return items


def test_sessions_lists_each_session_as_its_log_has_it(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel(["one", "two", "three"])
    with running_loopd(tmp_path, model, home=home) as loopd:
        loopd.turn("chat-1", "hi")
        loopd.turn("chat-1", "again", resume=True)
        loopd.turn("chat-2", "hello")
        items = listed(loopd)
    assert [(i.session, i.turns, i.compactions, i.untrusted) for i in items] == [
        ("chat-1", 2, 0, False),
        ("chat-2", 1, 0, False),
    ]
    # the prompt each session's last reply was written to, and the reply ("two", "three")
    assert [i.tokens for i in items] == [len(model.prompts[1]) + 3, len(model.prompts[2]) + 5]


def test_sessions_with_no_session_yet_is_an_empty_list(tmp_path: Path, home: Path) -> None:
    with running_loopd(tmp_path, ScriptedModel([]), home=home) as loopd:
        answers = exchange(loopd.socket, Sessions(), "v1")
    assert [(a.final, a.message) for a in answers] == [(True, SessionList(items=()))]


def test_session_show_pages_a_log_of_big_results_within_the_frame_limit(
    tmp_path: Path, home: Path
) -> None:
    logs = SessionLogs(home)
    logs.directory.mkdir(parents=True)
    log = logs.open("big")
    log.append(UserEntry(text="read them"))
    results = [str(n) * (300 * KIB) for n in range(5)]
    for content in results:
        log.append(
            ToolEntry(
                call="c1",
                name="call_tool",
                content=content,
                class_=DataClass.PRIVATE,
                untrusted=True,
                truncated=False,
            )
        )
    with running_loopd(tmp_path, ScriptedModel([]), home=home) as loopd:
        start: int | None = 0
        shown: list[ShownEntry] = []
        frames = 0
        while start is not None:
            payload = orjson.dumps(
                {
                    "id": "v1",
                    "final": True,
                    "message": {"kind": "session_show", "session": "big", "start": start},
                }
            )
            (frame,), closed = exchange_raw(loopd.socket, payload)
            assert closed
            assert len(frame) < MAX_FRAME
            frames += 1
            page = decode_envelope(frame).message
            assert isinstance(page, SessionEntries)
            shown.extend(page.entries)
            start = page.next
    assert frames >= 2
    assert [e.index for e in shown] == list(range(6))
    assert [e.text for e in shown[1:]] == results
    assert not any(e.cut for e in shown)


@pytest.mark.parametrize("kind", ["session_show", "compact"])
@pytest.mark.parametrize("session", ["../x", "a/b", ".hidden", ""], ids=repr)
def test_a_session_id_that_is_a_path_is_malformed_at_the_wire(
    tmp_path: Path, home: Path, kind: str, session: str
) -> None:
    (home / "loop").mkdir()
    (home / "loop" / "x.jsonl").write_bytes(b'{"type":"user","text":"not yours"}\n')
    payload = orjson.dumps(
        {"id": "v1", "final": True, "message": {"kind": kind, "session": session}}
    )
    model = ScriptedModel([])
    with running_loopd(tmp_path, model, home=home) as loopd:
        (frame,), _ = exchange_raw(loopd.socket, payload)
    message = orjson.loads(frame)["message"]
    assert (message["kind"], message["code"]) == ("error", "malformed")
    assert "not yours" not in message["message"]
    assert model.prompts == []


def test_show_of_a_session_with_no_log_or_a_damaged_one_is_an_error(
    tmp_path: Path, home: Path
) -> None:
    with running_loopd(tmp_path, ScriptedModel([]), home=home) as loopd:
        missing = exchange(loopd.socket, SessionShow(session="nobody"), "v1")[-1].message
        loopd.session_log("bad").parent.mkdir(parents=True, exist_ok=True)
        loopd.session_log("bad").write_bytes(b'{"type": "us\n')
        damaged = exchange(loopd.socket, SessionShow(session="bad"), "v1")[-1].message
        items = listed(loopd)  # the damaged log does not break the listing
    assert isinstance(missing, Error)
    assert missing.code is ErrorCode.MALFORMED
    assert missing.message == "session nobody has no log; bxctl sessions lists those loopd has"
    assert isinstance(damaged, Error)
    assert damaged.code is ErrorCode.UNAVAILABLE
    assert damaged.message.endswith("see runbook.md#session-log-damaged")
    assert [(i.session, i.turns, i.untrusted) for i in items] == [("bad", 0, True)]


def test_reading_the_sessions_does_not_wait_for_a_running_turn(tmp_path: Path, home: Path) -> None:
    started = threading.Event()
    go_on = threading.Event()

    def held(prompt: str) -> str:
        started.set()
        assert go_on.wait(30), "the test never let the model go on"
        return "done at last"

    model = ScriptedModel(["first", held])
    with running_loopd(tmp_path, model, home=home) as loopd:
        loopd.turn("chat-1", "hi")
        turn = threading.Thread(target=loopd.turn, args=("chat-1", "more"), kwargs={"resume": True})
        turn.start()
        try:
            assert started.wait(30)
            items = listed(loopd)  # the session's lock and the model are both held
            page = exchange(loopd.socket, SessionShow(session="chat-1"), "v2", 5.0)[-1].message
        finally:
            go_on.set()
            turn.join(30)
    assert [(i.session, i.turns) for i in items] == [("chat-1", 2)]
    assert isinstance(page, SessionEntries)
    assert [e.text for e in page.entries] == ["hi", "first", "more"]


def test_compact_is_answered_as_a_turn_and_the_listing_counts_it(
    tmp_path: Path, home: Path
) -> None:
    model = ScriptedModel([reply] * 50)
    with running_loopd(tmp_path, model, home=home, limits=COMPACTING) as loopd:
        for n in range(3):
            loopd.turn("chat-1", f"message {n}: " + "m" * 250, resume=n > 0)
        answers = exchange(loopd.socket, Compact(session="chat-1"), "k1")
        items = listed(loopd)
        entries = [orjson.loads(x) for x in loopd.session_log("chat-1").read_bytes().splitlines()]
    assert [a.id for a in answers] == ["k1"] * len(answers)
    *events, done = [a.message for a in answers]
    compacted = [
        e.event
        for e in events
        if isinstance(e, TurnEvent) and isinstance(e.event, ContextCompactedEvent)
    ]
    (event,) = compacted
    assert event.after < event.before
    assert isinstance(done, TurnDone)
    assert done.content == f"Compacted: {event.before} tokens became {event.after}."
    assert entries[-1]["type"] == "compaction"
    (item,) = items
    assert (item.compactions, item.tokens, item.turns) == (1, event.after, 3)


def test_compact_of_a_session_with_no_log_is_refused(tmp_path: Path, home: Path) -> None:
    with running_loopd(tmp_path, ScriptedModel([]), home=home, limits=COMPACTING) as loopd:
        answers = exchange(loopd.socket, Compact(session="nobody"), "k1")
        loopd.session_log("bad").write_bytes(b'{"type": "us')
        damaged = exchange(loopd.socket, Compact(session="bad"), "k2")[-1].message
    (only,) = answers
    assert isinstance(only.message, Error)
    assert only.message.code is ErrorCode.MALFORMED
    assert only.message.message == "session nobody has no log to compact"
    assert isinstance(damaged, Error)
    assert damaged.code is ErrorCode.UNAVAILABLE
    assert damaged.message.endswith("see runbook.md#session-log-damaged")
