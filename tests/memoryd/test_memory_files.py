"""The memory files' format (boxmaker.memoryd.files): round-trip, escaping, damage."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.memoryd.files import (
    Entry,
    MemoryFileDamagedError,
    parse_entries,
    read_entries,
    read_soul,
    render_entries,
)

T = "2026-11-30T12:00:00.000Z"
HERE = Path("memory.md")

# Text with the characters that matter to the format, often at line starts.
_PIECES = st.sampled_from(["<!-- entry", "\\", "\n", "\n\n", " -->", "a", "\r", "\u2028", "é"])
TEXTS = st.one_of(st.text(), st.lists(_PIECES, max_size=12).map("".join))
IDS = st.from_regex(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,20}", fullmatch=True)


@st.composite
def entry_lists(draw: st.DrawFn) -> list[Entry]:
    ids = draw(st.lists(IDS, unique=True, max_size=5))
    return [Entry(i, "memory", draw(TEXTS), draw(st.booleans()), T) for i in ids]


@given(entry_lists())
def test_any_entries_round_trip(entries: list[Entry]) -> None:
    assert parse_entries(render_entries(entries), "memory", HERE) == entries


def test_header_text_is_escaped_and_reads_back() -> None:
    entry = Entry("m-1", "memory", "<!-- entry m-2 " + T + " -->\n\\<!-- entry x", False, T)
    data = render_entries([entry])
    assert data.decode().splitlines()[1:3] == ["\\<!-- entry m-2 " + T + " -->", "\\\\<!-- entry x"]
    assert parse_entries(data, "memory", HERE) == [entry]


def test_the_format_is_readable_markdown() -> None:
    entries = [
        Entry("m-1", "memory", "The owner prefers tabs.", False, T),
        Entry("n-2", "note", "Check the build.", True, T),
    ]
    assert render_entries(entries).decode() == (
        f"<!-- entry m-1 {T} -->\nThe owner prefers tabs.\n\n"
        f"<!-- entry n-2 {T} untrusted -->\nCheck the build.\n\n"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(f"<!-- entry a {T} -->\nx", ["x"], id="no-final-line-feed"),
        pytest.param(f"<!-- entry a {T} -->\nx\n", ["x"], id="no-blank-line"),
        pytest.param(f"\n\n<!-- entry a {T} -->\nx\n\n", ["x"], id="blank-lines-first"),
        pytest.param(f"<!-- entry a {T} -->\nx\n<!-- entry b {T} -->\ny", ["x", "y"], id="tight"),
        pytest.param("", [], id="empty-file"),
    ],
)
def test_hand_edits_read(text: str, expected: list[str]) -> None:
    assert [e.text for e in parse_entries(text.encode(), "memory", HERE)] == expected


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("# My memory\n", 1, id="text-before-first-header"),
        pytest.param(f"<!-- entry a {T} -->\nx\n<!-- entry b -->\n", 3, id="bad-header"),
        pytest.param("<!-- entry a yesterday -->\n", 1, id="bad-time"),
        pytest.param(f"<!-- entry .a {T} -->\n", 1, id="bad-id"),
        pytest.param(f"<!-- entry a {T} -->\n\n<!-- entry a {T} -->\n", 3, id="duplicate-id"),
        pytest.param(f"<!-- entry a {T} untrusted! -->\n", 1, id="bad-mark"),
    ],
)
def test_damage_names_the_file_and_line(text: str, line: int) -> None:
    with pytest.raises(MemoryFileDamagedError) as caught:
        parse_entries(text.encode(), "memory", HERE)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"memory.md:{line}: ")


def test_bytes_that_are_not_utf8_are_damage() -> None:
    with pytest.raises(MemoryFileDamagedError, match=r"memory\.md:2: not UTF-8"):
        parse_entries(f"<!-- entry a {T} -->\n\xff".encode("latin-1"), "memory", HERE)


def test_missing_files_are_empty(tmp_path: Path) -> None:
    assert read_entries(tmp_path / "user.md", "user") == []
    assert read_soul(tmp_path) == ""


def test_soul_is_read_raw(tmp_path: Path) -> None:
    (tmp_path / "soul.md").write_text("# Soul\n<!-- entry not parsed -->\n", encoding="utf-8")
    assert read_soul(tmp_path) == "# Soul\n<!-- entry not parsed -->\n"


def test_read_entries_sets_the_kind(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_bytes(render_entries([Entry("n-1", "note", "x", True, T)]))
    assert read_entries(path, "note") == [Entry("n-1", "note", "x", True, T)]
