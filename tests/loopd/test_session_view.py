"""loopd's view of its session logs (`loopd.session_view`): the summaries, the pages of
a log that fit a frame, and logs that are damaged or being written.

The logs are written with the real `SessionLog.append`, in a temporary home.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.envelope import Envelope, encode_envelope
from boxmaker.core.wire.frame_fit import FRAME_BUDGET
from boxmaker.core.wire.frames import MAX_FRAME
from boxmaker.core.wire.loop import SessionEntries, SessionSummary
from boxmaker.loopd.session_log import (
    AnyEntry,
    CompactionEntry,
    MemoryEntry,
    ModelEntry,
    NoticeEntry,
    SessionLog,
    SessionLogDamagedError,
    SessionLogs,
    ToolEntry,
    UserEntry,
)
from boxmaker.loopd.session_view import (
    NoSuchSessionError,
    SessionView,
    page_summaries,
    summarise,
)

LAST = "2026-11-30T12:05:00.000Z"
KIB = 1024


def tool(content: str, *, untrusted: bool = False, name: str = "call_tool") -> ToolEntry:
    return ToolEntry(
        call="c1",
        name=name,
        content=content,
        class_=DataClass.PRIVATE,
        untrusted=untrusted,
        truncated=False,
    )


def compaction(*, before: int, after: int, untrusted: bool = False) -> CompactionEntry:
    return CompactionEntry(
        summary="the owner asked for notes",
        replaces=((0, 3),),
        dropped=0,
        before=before,
        after=after,
        untrusted=untrusted,
    )


def write_log(logs: SessionLogs, session: str, entries: list[AnyEntry]) -> SessionLog:
    logs.directory.mkdir(parents=True, exist_ok=True)
    log = logs.open(session)
    for entry in entries:
        log.append(entry)
    return log


def pages(view: SessionView, session: str) -> list[SessionEntries]:
    found: list[SessionEntries] = []
    start = 0
    while True:
        page = view.show(session, start, "v1")
        found.append(page)
        if page.next is None:
            return found
        assert page.next > start
        start = page.next


def wire_size(page: SessionEntries) -> int:
    return len(encode_envelope(Envelope(id="v1", final=True, message=page)))


# --- the summaries ---------------------------------------------------------------------


def test_a_summary_counts_the_owners_turns_and_the_last_prompt() -> None:
    entries: list[AnyEntry] = [
        MemoryEntry(text="soul"),
        UserEntry(text="hi"),
        ModelEntry(text="hello", ids=(1, 2, 3), prompt=100),
        NoticeEntry(text="[boxmaker] save now"),  # loopd's words: not an owner's turn
        UserEntry(text="read /x"),
        tool("# notes"),
        ModelEntry(text="done", ids=(4, 5), prompt=240),
    ]
    summary = summarise("chat-1", entries, LAST)
    assert summary == SessionSummary(
        session="chat-1", turns=2, tokens=242, compactions=0, untrusted=False, last=LAST
    )


@pytest.mark.parametrize(
    ("entries", "tokens"),
    [
        pytest.param(
            [ModelEntry(text="a", ids=(1,), prompt=50), compaction(before=1812, after=604)],
            604,
            id="a-compaction-after-the-last-reply",
        ),
        pytest.param(
            [compaction(before=1812, after=604), ModelEntry(text="a", ids=(1, 2), prompt=700)],
            702,
            id="a-reply-after-the-compaction",
        ),
        pytest.param(
            [ModelEntry(text="a", ids=(1,), prompt=50), ModelEntry(text="b", ids=(1,))],
            0,
            id="the-last-reply-written-before-prompt-was-kept",
        ),
        pytest.param([UserEntry(text="hi")], 0, id="no-reply-yet"),
    ],
)
def test_tokens_are_the_latest_known_prompt(entries: list[AnyEntry], tokens: int) -> None:
    assert summarise("s", entries, LAST).tokens == tokens


@pytest.mark.parametrize(
    ("entries", "untrusted"),
    [
        pytest.param([tool("x")], False, id="trusted-result"),
        pytest.param([tool("x", untrusted=True)], True, id="untrusted-result"),
        pytest.param([compaction(before=9, after=3, untrusted=True)], True, id="compaction"),
    ],
)
def test_untrusted_is_any_untrusted_result_or_summary(
    entries: list[AnyEntry], untrusted: bool
) -> None:
    summary = summarise("s", entries, LAST)
    assert summary.untrusted is untrusted
    assert summary.compactions == sum(isinstance(e, CompactionEntry) for e in entries)


def test_the_listing_has_every_log_with_its_mtime_and_nothing_else(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "chat-2", [UserEntry(text="hi"), ModelEntry(text="yo", ids=(1,), prompt=9)])
    write_log(logs, "chat-1", [UserEntry(text="one"), UserEntry(text="two")])
    for stray in (".hidden.jsonl", "notes.txt", "chat-3.json", "a b.jsonl", "chat-1.jsonl.tmp"):
        (logs.directory / stray).write_bytes(b"")
    os.utime(logs.directory / "chat-1.jsonl", (1_764_504_300, 1_764_504_300))
    items = SessionView(logs).summaries()
    assert [i.session for i in items] == ["chat-1", "chat-2"]
    assert items[0].turns == 2
    assert items[0].last == "2025-11-30T12:05:00.000Z"
    assert items[1].tokens == 10


def test_no_sessions_directory_is_an_empty_listing(tmp_path: Path) -> None:
    assert SessionView(SessionLogs(tmp_path)).summaries() == []


def test_a_damaged_log_is_listed_from_what_reads_and_fails_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "good", [UserEntry(text="hi")])
    write_log(logs, "bad", [UserEntry(text="one"), ModelEntry(text="a", ids=(1,), prompt=30)])
    with (logs.directory / "bad.jsonl").open("ab") as file:
        file.write(b'{"type": "user", "text": "two"}\n{"type": "nonsense"}\n')
        file.write(b'{"type": "user", "text": "after the damage"}\n')
    caplog.set_level(logging.ERROR)
    good, bad = sorted(SessionView(logs).summaries(), key=lambda s: s.session, reverse=True)
    assert good.session == "good"
    assert good.untrusted is False
    assert (bad.session, bad.turns, bad.tokens) == ("bad", 2, 31)  # the lines before line 4
    assert bad.untrusted is True  # what follows the damage cannot be read
    (record,) = [r for r in caplog.records if "session_log_damaged" in r.getMessage()]
    assert record.getMessage().endswith("see runbook.md#session-log-damaged")
    with pytest.raises(SessionLogDamagedError, match=r"bad\.jsonl:4: not a session log entry"):
        SessionView(logs).show("bad", 0, "v1")


def test_a_log_that_stays_torn_is_damaged_after_the_retries(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "torn", [UserEntry(text="hi")])
    with (logs.directory / "torn.jsonl").open("ab") as file:
        file.write(b'{"type": "user", "te')
    (summary,) = SessionView(logs).summaries()
    assert (summary.turns, summary.untrusted) == (1, True)


class TornOnce(SessionLogs):
    """Logs whose first read ends in the middle of a line being appended, as a read
    that races an append can; every later read is whole."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.reads = 0

    def open(self, session: str) -> SessionLog:
        self.reads += 1
        if self.reads == 1:
            raise SessionLogDamagedError(f"{self.path(session)}:2: the last line is cut short")
        return super().open(session)


def test_a_read_that_races_an_append_is_read_again(tmp_path: Path) -> None:
    logs = TornOnce(tmp_path)
    write_log(SessionLogs(tmp_path), "s", [UserEntry(text="hi"), UserEntry(text="again")])
    (summary,) = SessionView(logs).summaries()
    assert (summary.turns, summary.untrusted) == (2, False)
    assert logs.reads == 2


def test_summaries_page_to_fit_the_budget() -> None:
    items = [
        SessionSummary(
            session=f"s-{n:04d}", turns=n, tokens=0, compactions=0, untrusted=False, last=LAST
        )
        for n in range(50)
    ]
    found = page_summaries(items, "v1", budget=2_000)
    assert len(found) > 1
    assert [i for page in found for i in page] == items
    assert page_summaries([], "v1") == [()]


# --- the pages -------------------------------------------------------------------------


def test_a_log_of_300_kib_results_pages_and_every_entry_arrives_whole(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    results = [chr(ord("a") + n) * (300 * KIB) for n in range(6)]
    entries: list[AnyEntry] = [UserEntry(text="read them all")]
    for content in results:
        entries += [ModelEntry(text="next", ids=(1,), prompt=9), tool(content, untrusted=True)]
    entries.append(ModelEntry(text="All read.", ids=(1, 2), prompt=99))
    write_log(logs, "big", entries)
    found = pages(SessionView(logs), "big")
    assert len(found) >= 2
    shown = [e for page in found for e in page.entries]
    assert [e.index for e in shown] == list(range(len(entries)))
    assert not any(e.cut for e in shown)
    assert [e.text for e in shown if e.type == "tool"] == results
    assert all(e.untrusted and e.name == "call_tool" for e in shown if e.type == "tool")
    assert all(wire_size(page) <= FRAME_BUDGET for page in found)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("x" * (1200 * KIB), id="longer-than-a-frame"),
        pytest.param("\x01" * (300 * KIB), id="escapes-past-a-frame"),
        pytest.param("é\u202e" * (400 * KIB), id="multibyte"),
    ],
)
def test_an_entry_too_big_alone_is_cut_to_fit_and_marked(tmp_path: Path, text: str) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "s", [UserEntry(text="hi"), tool(text), ModelEntry(text="ok", ids=(1,))])
    view = SessionView(logs)
    first = view.show("s", 0, "v1")
    assert [e.index for e in first.entries] == [0]  # the big one does not fit beside it
    assert first.next == 1
    second = view.show("s", 1, "v1")
    (cut,) = second.entries
    assert cut.cut is True
    assert text.startswith(cut.text)
    assert len(cut.text) > 100 * KIB  # cut to fit, not to nothing
    assert wire_size(second) <= FRAME_BUDGET < MAX_FRAME
    assert second.next == 2
    last = view.show("s", 2, "v1")
    assert [(e.index, e.text, e.cut) for e in last.entries] == [(2, "ok", False)]
    assert last.next is None


def test_each_type_shows_its_text(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    result = tool("the whole result", name="read_file")
    result = result.model_copy(update={"shown": "what the model saw"})
    entries: list[AnyEntry] = [
        MemoryEntry(text="soul"),
        UserEntry(text="hi"),
        ModelEntry(text="hello", ids=(1,)),
        result,
        NoticeEntry(text="[boxmaker] save now"),
        compaction(before=10, after=4, untrusted=True),
    ]
    write_log(logs, "s", entries)
    (page,) = pages(SessionView(logs), "s")
    assert [(e.type, e.text, e.name, e.untrusted) for e in page.entries] == [
        ("memory", "soul", None, False),
        ("user", "hi", None, False),
        ("model", "hello", None, False),
        ("tool", "the whole result", "read_file", False),
        ("notice", "[boxmaker] save now", None, False),
        ("compaction", "the owner asked for notes", None, True),
    ]


def test_a_start_past_the_end_is_an_empty_last_page(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "s", [UserEntry(text="hi")])
    page = SessionView(logs).show("s", 5, "v1")
    assert (page.entries, page.next) == ((), None)


def test_a_session_with_no_log_cannot_be_shown(tmp_path: Path) -> None:
    with pytest.raises(NoSuchSessionError, match="session nobody has no log"):
        SessionView(SessionLogs(tmp_path)).show("nobody", 0, "v1")


def test_the_summary_timestamp_is_the_wire_format(tmp_path: Path) -> None:
    logs = SessionLogs(tmp_path)
    write_log(logs, "s", [UserEntry(text="hi")])
    (summary,) = SessionView(logs).summaries()
    mtime = (logs.directory / "s.jsonl").stat().st_mtime
    assert summary.last == format_timestamp(datetime.fromtimestamp(mtime, UTC))
