"""Every runbook pointer names a heading of runbook.md, and the table is the document.

Messages take their pointer from `boxmaker.core.runbook.Runbook`; the gate checks
that the enum and runbook.md's `## ` headings are the same set, and that each
entry has its five parts. Pointers still written out in the source text
(docstrings, and any message that does not use the enum) are read from the text
and checked against the headings; a pointer built at run time any other way is
one the gate cannot see. The text scan also fails when it finds no pointer at
all, since that means the search itself is broken.
"""

from __future__ import annotations

import re
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
