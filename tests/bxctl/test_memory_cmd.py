"""`bxctl memory log` and `bxctl memory reindex` against a real memoryd served in-process
on real sockets (as tests/memoryd/test_memoryd_sockets.py serves it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from boxmaker.bxctl import main as bxctl_main
from boxmaker.bxctl.memory_cmd import journal_lines
from boxmaker.core.home.layout import HOME_VARIABLE, Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse
from boxmaker.core.wire.memory import MemoryCall
from boxmaker.memoryd.files import Entry, render_entries
from boxmaker.testing.daemons import running_memoryd
from boxmaker.testing.homes import make_home
from boxmaker.testing.sockets import exchange


def _clock() -> datetime:
    return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A home whose memoryd is served in-process; `BOXMAKER_HOME` names it."""
    home = Home(make_home(tmp_path))
    monkeypatch.setenv(HOME_VARIABLE, str(home.root))
    with running_memoryd(home, _clock):
        yield home


def _note(home: Home, text: str) -> None:
    call = MemoryCall(
        session="chat-1",
        call="c1",
        tool="memory_note",
        arguments=json.dumps({"text": text}),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )
    answers = exchange(home.broker_memory_socket, call)
    assert isinstance(answers[-1].message, ResultResponse)


def test_memory_log_prints_the_journal_line_of_a_write(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    _note(home, "Kyle likes tea.")
    _note(home, "Kyle likes coffee.")
    assert bxctl_main.main(["memory", "log"]) == 0
    shown = capsys.readouterr()
    assert shown.err == ""
    records = [json.loads(line) for line in shown.out.splitlines()]
    assert len(records) == 2
    assert all(r["session"] == "chat-1" and r["action"] == "noted" for r in records)
    assert "Kyle" not in shown.out  # the journal never holds the text

    assert bxctl_main.main(["memory", "log", "--limit", "1"]) == 0
    newest = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in newest] == records[-1:]  # newest last


def test_memory_log_of_an_empty_journal_prints_nothing(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bxctl_main.main(["memory", "log", "--socket", str(home.owner_memory_socket)]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("limit", ["0", "1001", "x", "٣"])
def test_memory_log_refuses_a_limit_out_of_range(
    limit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bxctl_main.main(["memory", "log", "--limit", limit]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_reindex_after_a_hand_edit_reports_the_count(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bxctl_main.main(["memory", "reindex"]) == 0
    assert capsys.readouterr().out == "memory: reindexed, 0 entries\n"
    entries = [
        Entry("m-0123456789ab", "memory", "Prefers vim.", False, "2026-11-30T12:00:00.000Z"),
        Entry("m-0123456789ac", "memory", "Lives in Oslo.", False, "2026-11-30T12:00:00.000Z"),
    ]
    (home.memory / "memory.md").write_bytes(render_entries(entries))
    assert bxctl_main.main(["memory", "reindex"]) == 0
    assert capsys.readouterr().out == "memory: reindexed, 2 entries\n"


def test_reindex_of_a_damaged_file_is_one_line_and_exit_1(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    (home.memory / "memory.md").write_text("stray text\n")
    assert bxctl_main.main(["memory", "reindex"]) == 1
    shown = capsys.readouterr()
    assert shown.out == ""
    assert shown.err.startswith("bxctl: memoryd refused reindex: unavailable: ")
    assert "memory.md:1" in shown.err
    assert len(shown.err.splitlines()) == 1


@pytest.mark.parametrize("action", ["log", "reindex"])
def test_memoryd_not_running_is_one_line_with_the_runbook_pointer(
    action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "admin.sock"
    assert bxctl_main.main(["memory", action, "--socket", str(missing)]) == 1
    shown = capsys.readouterr()
    assert shown.out == ""
    lines = shown.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"bxctl: cannot reach memoryd at {missing} ")
    assert lines[0].endswith("see runbook.md#memoryd-unavailable")


def test_journal_lines_are_printed_as_data() -> None:
    hostile = '{"session":"chat-\x1b[2J\u202e","action":"noted"}'
    (shown,) = journal_lines([hostile])
    assert shown == '{"session":"chat-\\u001b[2J\\u202e","action":"noted"}'
    assert shown.isprintable()


def test_memory_log_names_the_entries_the_block_leaves_out_and_why(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    at = "2026-11-30T12:00:00.000Z"
    big = "x" * 7_000
    entries = [Entry(f"m-000{n}", "memory", f"{n} {big}", False, at) for n in range(3)]
    entries.insert(1, Entry("m-hand", "memory", "marked by hand", True, at))
    (home.memory / "memory.md").write_bytes(render_entries(entries))
    _note(home, "Kyle likes tea.")
    assert bxctl_main.main(["memory", "log"]) == 0
    journal, *block = capsys.readouterr().out.splitlines()
    assert json.loads(journal)["action"] == "noted"
    assert block == [
        "memory block: leaves out 2 entries; see runbook.md#memory-entry-excluded",
        "memory block: m-hand in memory.md: untrusted",
        "memory block: m-0002 in memory.md: over-budget",
    ]


def test_memory_log_counts_what_it_does_not_name(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    at = "2026-11-30T12:00:00.000Z"
    entries = [Entry(f"u-{n:05d}", "user", f"fact {n:05d} " * 4, False, at) for n in range(3_000)]
    (home.memory / "user.md").write_bytes(render_entries(entries))
    assert bxctl_main.main(["memory", "log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = int(lines[0].split()[4].replace(",", ""))
    assert (
        lines[0]
        == f"memory block: leaves out {total:,} entries; see runbook.md#memory-entry-excluded"
    )
    assert len(lines) == 1 + 1_000 + 1
    assert lines[1].endswith(": over-budget")
    assert " in user.md: " in lines[1]
    assert lines[-1] == f"memory block: and {total - 1_000:,} more, not named here"
