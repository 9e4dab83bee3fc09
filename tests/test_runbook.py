"""Every `runbook.md#<anchor>` pointer written in the sources has its heading.

The gate reads pointers as written out in the source text; a pointer it cannot
read (built at run time) is a pointer with no entry, which is why messages write
theirs out in full. It also fails when it finds no pointer at all, since that
means the search itself is broken.
"""

from __future__ import annotations

import re
from pathlib import Path

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


def _sources() -> dict[str, str]:
    files = [*ROOT.joinpath("boxmaker").rglob("*.py"), *ROOT.joinpath("tests").rglob("*.py")]
    return {str(p.relative_to(ROOT)): p.read_text() for p in files if p.name != "test_runbook.py"}


def test_every_pointer_has_a_heading() -> None:
    assert missing(_sources(), (ROOT / "runbook.md").read_text()) == []


def test_every_heading_has_the_five_parts() -> None:
    text = (ROOT / "runbook.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections, "runbook.md has no entries"
    for section in sections:
        anchor = section.splitlines()[0].strip()
        for part in ("What you see", "Why", "Confirm", "Fix", "Check the fix"):
            assert f"**{part}" in section, f"runbook.md#{anchor} lacks its '{part}' part"


def test_the_gate_finds_a_missing_heading() -> None:
    sources = {"a.py": 'print("see runbook.md#no-such-entry")'}
    assert missing(sources, "## other\n") != []


def test_the_gate_fails_when_it_finds_no_pointer() -> None:
    assert missing({"a.py": "print('hello')"}, "## other\n") != []


def test_the_gate_passes_a_matching_heading() -> None:
    assert missing({"a.py": 'x = "see runbook.md#grants-invalid"'}, "## grants-invalid\n") == []
