"""Every runbook pointer names a heading of runbook.md, and the table is the document.

Messages take their pointer from `boxmaker.core.runbook.Runbook`; the gate checks
that the enum and runbook.md's `## ` headings are the same set, and that each
entry has its five parts. Pointers still written out in the source text
(docstrings, and any message that does not use the enum) are read from the text
and checked against the headings; a pointer built at run time any other way is
one the gate cannot see. The text scan also fails when it finds no pointer at
all, since that means the search itself is broken.

runbook.md opens with an index, one line per entry in the enum's order, each with
its one-line summary: `write_index` writes it from the enum and the summaries, and
the test fails, printing the index as it should read, when the two differ.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from boxmaker.core.runbook import Runbook

ROOT = Path(__file__).resolve().parent.parent
POINTER = re.compile(r"runbook\.md#([A-Za-z0-9_-]*)")


def pointers(sources: dict[str, str]) -> dict[str, set[str]]:
    """anchor -> the files that point at it."""
    found: dict[str, set[str]] = {}
    for name, text in sources.items():
        for anchor in POINTER.findall(text):
            found.setdefault(anchor, set()).add(name)
    return found


def headings(runbook: str) -> set[str]:
    return {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}


def sections(runbook: str) -> dict[str, str]:
    """anchor -> the text of its entry, heading line included."""
    parts = re.split(r"^## ", runbook, flags=re.MULTILINE)[1:]
    return {part.splitlines()[0].strip(): part for part in parts}


PARTS = ("What you see", "Why", "Confirm", "Fix", "Check the fix")


def lacking_parts(section: str) -> list[str]:
    return [part for part in PARTS if f"**{part}" not in section]


def drift(anchors: set[str], runbook: str) -> list[str]:
    """How the enum's anchors and runbook.md's headings differ (empty: not at all)."""
    have = headings(runbook)
    if not anchors:
        return ["the Runbook enum has no member: the table is broken"]
    return [
        *(f"Runbook has {a!r} but runbook.md has no '## {a}'" for a in sorted(anchors - have)),
        *(
            f"runbook.md has '## {a}' but Runbook has no member for it"
            for a in sorted(have - anchors)
        ),
    ]


def missing(sources: dict[str, str], runbook: str) -> list[str]:
    found = pointers(sources)
    if not found:
        return ["no runbook pointer found at all: the search is broken"]
    have = headings(runbook)
    return [
        f"runbook.md#{anchor} (from {', '.join(sorted(files))}) has no '## {anchor}' heading"
        for anchor, files in sorted(found.items())
        if anchor not in have
    ]


_INDEX_LINE = re.compile(r"^- \[([^\]]+)\]\(#([^)]+)\): (.+)$")
NO_SUMMARY = "<one line: what the owner sees>"


def _index_lines(runbook: str) -> list[str]:
    """The lines of the index: those before the first entry shaped `- [a](#a): text`."""
    preamble = re.split(r"^## ", runbook, maxsplit=1, flags=re.MULTILINE)[0]
    return [line for line in preamble.splitlines() if _INDEX_LINE.match(line)]


def index_of(runbook: str) -> dict[str, str]:
    """The index: anchor -> its summary, in the order written. A line whose text and
    link name different anchors is read under its link's."""
    lines = (_INDEX_LINE.match(line) for line in _index_lines(runbook))
    return {line.group(2): line.group(3) for line in lines if line is not None}


def write_index(anchors: Iterable[str], summaries: Mapping[str, str]) -> str:
    """The index: one line per anchor, in this order, each with its summary."""
    return "\n".join(f"- [{a}](#{a}): {summaries.get(a, NO_SUMMARY)}" for a in anchors)


def index_drift(anchors: list[str], runbook: str) -> list[str]:
    """How runbook.md's index differs from the one written for `anchors` (empty: not at
    all), ending with the index as it should read."""
    have = index_of(runbook)
    written = write_index(anchors, have)
    if not have:
        return ["runbook.md has no index before its first entry", written]
    if "\n".join(_index_lines(runbook)) == written:
        return []
    return [
        *(f"the index lacks {a!r}" for a in anchors if a not in have),
        *(f"the index has {a!r}, which Runbook has not" for a in have if a not in anchors),
        f"runbook.md's index should read:\n{written}",
    ]


# the table itself writes `runbook.md#<anchor>` and builds the pointer from its
# members; the enum tests below check it against the document instead
_NOT_SCANNED = {"tests/test_runbook.py", "boxmaker/core/runbook.py"}


def _sources() -> dict[str, str]:
    files = [*ROOT.joinpath("boxmaker").rglob("*.py"), *ROOT.joinpath("tests").rglob("*.py")]
    named = {str(p.relative_to(ROOT)): p for p in files}
    return {name: p.read_text() for name, p in named.items() if name not in _NOT_SCANNED}


def _runbook() -> str:
    return (ROOT / "runbook.md").read_text()


def test_every_pointer_has_a_heading() -> None:
    assert missing(_sources(), _runbook()) == []


def test_every_heading_has_the_five_parts() -> None:
    entries = sections(_runbook())
    assert entries, "runbook.md has no entries"
    for anchor, section in entries.items():
        assert lacking_parts(section) == [], f"runbook.md#{anchor} lacks parts"


def test_the_enum_and_the_headings_are_the_same_set() -> None:
    assert drift({member.value for member in Runbook}, _runbook()) == []


def test_every_member_has_an_entry_with_the_five_parts() -> None:
    entries = sections(_runbook())
    for member in Runbook:
        assert member.value in entries, f"{member!r} has no '## {member.value}' in runbook.md"
        assert lacking_parts(entries[member.value]) == [], f"runbook.md#{member} lacks parts"


def test_a_pointer_is_the_words_messages_always_wrote() -> None:
    assert Runbook.SESSION_LOG_DAMAGED.pointer == "see runbook.md#session-log-damaged"
    for member in Runbook:
        assert member.pointer == f"see runbook.md#{member.value}"
        assert missing({"m.py": member.pointer}, _runbook()) == []


def test_drift_finds_a_member_with_no_heading() -> None:
    assert drift({"a", "b"}, "## a\n") == ["Runbook has 'b' but runbook.md has no '## b'"]


def test_drift_finds_a_heading_with_no_member() -> None:
    assert drift({"a"}, "## a\n## b\n") == [
        "runbook.md has '## b' but Runbook has no member for it"
    ]


def test_drift_fails_on_an_empty_table() -> None:
    assert drift(set(), "") != []


def test_drift_passes_a_matching_table() -> None:
    assert drift({"a", "b"}, "## a\ntext\n## b\n") == []


def test_the_parts_check_finds_a_missing_part() -> None:
    entry = "x\n**What you see.** a\n**Why.** b\n**Confirm.** c\n**Fix.** d\n"
    assert lacking_parts(entry) == ["Check the fix"]
    assert lacking_parts(entry + "**Check the fix.** e\n") == []


def test_the_gate_finds_a_missing_heading() -> None:
    sources = {"a.py": 'print("see runbook.md#no-such-entry")'}
    assert missing(sources, "## other\n") != []


def test_the_gate_fails_when_it_finds_no_pointer() -> None:
    assert missing({"a.py": "print('hello')"}, "## other\n") != []


def test_the_gate_passes_a_matching_heading() -> None:
    assert missing({"a.py": 'x = "see runbook.md#grants-invalid"'}, "## grants-invalid\n") == []


def test_the_index_is_the_table() -> None:
    assert index_drift([member.value for member in Runbook], _runbook()) == []


def test_every_index_line_has_a_summary() -> None:
    summaries = index_of(_runbook())
    assert len(summaries) == len(Runbook)
    for anchor, summary in summaries.items():
        assert summary.strip(), f"{anchor} has no summary"
        assert summary != NO_SUMMARY, f"{anchor} has no summary"


def test_the_index_check_finds_a_member_missing() -> None:
    runbook = "intro\n\n- [a](#a): one\n\n## a\n## b\n"
    found = index_drift(["a", "b"], runbook)
    assert found[0] == "the index lacks 'b'"
    assert found[-1].endswith(f"- [a](#a): one\n- [b](#b): {NO_SUMMARY}")


def test_the_index_check_finds_a_line_with_no_member() -> None:
    runbook = "- [a](#a): one\n- [gone](#gone): two\n## a\n"
    assert index_drift(["a"], runbook)[0] == "the index has 'gone', which Runbook has not"


def test_the_index_check_finds_the_order_changed() -> None:
    runbook = "- [b](#b): two\n- [a](#a): one\n## a\n## b\n"
    assert index_drift(["a", "b"], runbook) == [
        "runbook.md's index should read:\n- [a](#a): one\n- [b](#b): two"
    ]


def test_the_index_check_finds_a_link_to_another_entry() -> None:
    runbook = "- [a](#b): one\n- [b](#b): two\n## a\n## b\n"
    assert index_drift(["a", "b"], runbook) != []


def test_the_index_check_finds_no_index() -> None:
    assert index_drift(["a"], "## a\n")[0] == "runbook.md has no index before its first entry"


def test_the_index_check_passes_a_matching_index() -> None:
    assert index_drift(["a", "b"], "x\n- [a](#a): one\n- [b](#b): two\n\n## a\n## b\n") == []
