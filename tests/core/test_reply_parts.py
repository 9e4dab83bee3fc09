"""Splitting a long reply into posts: each within the limit, escaped alone, nothing lost."""

from __future__ import annotations

import pytest

from boxmaker.core.reply_escape import NOTICE, escape_reply
from boxmaker.core.reply_parts import CONTINUED, split_reply


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
