"""Splitting a long reply into posts: each within the limit, escaped alone, nothing lost."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from boxmaker.core.display.reply_escape import NOTICE, escape_reply
from boxmaker.core.display.reply_parts import CONTINUED, split_reply
from boxmaker.testing.fetch_simulator import fetches

_HEADINGS = MarkdownIt("commonmark")


def test_a_reply_that_fits_is_one_part_escaped_as_before() -> None:
    text = "A short answer with https://example.org/ in it."
    assert split_reply(text, True) == [escape_reply(text, True).message]
    assert split_reply(text, False) == [escape_reply(text, False).message]


@pytest.mark.parametrize("untrusted", [False, True])
def test_long_replies_are_cut_on_lines_within_the_limit(untrusted: bool) -> None:
    lines = [f"row {n} of the table, with a [link](https://x.example/{n})" for n in range(400)]
    parts = split_reply("\n".join(lines), untrusted, limit=2_000)
    assert len(parts) > 5
    assert all(len(part) <= 2_000 for part in parts)
    assert all(part.count(CONTINUED) == 1 for part in parts[:-1])
    assert CONTINUED not in parts[-1]
    assert all((NOTICE in part) is untrusted for part in parts)
    rows = [line for part in parts for line in part.splitlines() if line.startswith("row ")]
    assert [row.split(" of")[0] for row in rows] == [f"row {n}" for n in range(400)]


def test_a_line_longer_than_a_post_is_cut_between_characters() -> None:
    text = "é" * 5_000  # one line, no break anywhere
    parts = split_reply(text, False, limit=1_000)
    assert all(len(part) <= 1_000 for part in parts)
    assert "".join(part.replace(f"\n\n{CONTINUED}", "") for part in parts) == text


def test_a_limit_too_small_for_any_part_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold any part"):
        split_reply("x" * 100, True, limit=10)


def test_every_part_starts_from_the_whole_reply() -> None:
    """An image in the first part makes a definition in a later one an image's (its URL
    no link, no preview); only the first part keeps headings, as a later one may start
    inside a code block (here a shell script's comments)."""
    filler = "\n".join(f"line {n}" for n in range(40))
    script = "\n".join(f"# step {n}\necho {n}" for n in range(40))
    definition = "[r]: http://i.example/x.png"
    text = f"# Title\n\n![x][r]\n\n{filler}\n\n{definition}\n\n```sh\n{script}\n```"
    first, *rest = split_reply(text, False, limit=400)
    assert rest
    assert next(t.content for t in _HEADINGS.parse(first) if t.type == "inline") == "Title"
    for part in rest:
        assert not [t for t in _HEADINGS.parse(part) if t.type == "heading_open"], part
    (holding,) = [part for part in rest if "\\[r\\]" in part]
    assert "\\[r\\]: http&#58;&#47;&#47;i\\.example&#47;x\\.png" in holding
    assert fetches(holding, {"unsafe_links": "false"}) == []
    alone = escape_reply(definition, False).message
    assert fetches(alone, {"unsafe_links": "false"}) == ["http://i.example/x.png"]
