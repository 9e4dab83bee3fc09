"""Streaming a reply: only what no continuation can turn into a tool call goes out early."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boxmaker.core.reply_stream import ReplyStream, streamable
from boxmaker.core.tool_calls import parse_reply

CALL = '{"name": "clock", "arguments": {}}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", "", id="nothing-yet"),
        pytest.param("  \n", "", id="only-whitespace"),
        pytest.param("  Hello", "Hello", id="leading-whitespace-dropped"),
        pytest.param("Hello, wor", "Hello, wor", id="plain-text-streams"),
        pytest.param("Hello \n", "Hello", id="trailing-whitespace-waits"),
        pytest.param("Price < 5", "Price < 5", id="a-less-than-sign-in-text"),
        pytest.param("a < b <tool", "a < b", id="a-tail-that-may-open-a-call"),
        pytest.param("Hello <", "Hello", id="a-lone-angle-bracket-at-the-end"),
        pytest.param("Hello <tool_call", "Hello", id="an-opener-almost-written"),
        pytest.param('Hello <tool_call>{"name"', "Hello", id="an-open-call"),
        pytest.param("a <tool_call>x</tool_", "a", id="a-closer-half-written"),
        pytest.param(f"Hi <tool_call>{CALL}</tool_call> and", "Hi  and", id="text-around-a-call"),
        pytest.param(f"<tool_call>{CALL}</tool_call>\nDone", "Done", id="text-after-a-call"),
        pytest.param("a <<tool_call>", "a <", id="a-bracket-before-an-opener"),
        pytest.param("{", "", id="a-bare-call-may-open"),
        pytest.param('  {"name": "clock"', "", id="a-bare-call-so-far"),
        pytest.param("{ braces } and more", "", id="braces-wait-for-the-end"),
        pytest.param("{ not a call <tool_call>", "{ not a call", id="a-tag-ends-the-bare-form"),
        pytest.param("`", "", id="a-fence-may-open"),
        pytest.param("```js", "", id="a-fence-language-half-written"),
        pytest.param("```json", "", id="a-json-fence"),
        pytest.param("```json  \n", "", id="a-json-fence-and-its-newline"),
        pytest.param("```\n{", "", id="a-bare-fence-and-a-brace"),
        pytest.param("```json\n{", "", id="a-json-fence-and-a-brace"),
        pytest.param("```python\nx = 1", "```python\nx = 1", id="another-language"),
        pytest.param("```json x", "```json x", id="no-newline-after-the-fence"),
        pytest.param("```jsonx", "```jsonx", id="not-the-json-language"),
        pytest.param("```\n\nprint(1)", "```\n\nprint(1)", id="a-fence-around-code"),
        pytest.param("``x", "``x", id="not-a-fence"),
        pytest.param("é日本", "é日本", id="any-characters"),
    ],
)
def test_what_is_streamable(text: str, expected: str) -> None:
    assert streamable(text) == expected


def release(pieces: list[str]) -> tuple[list[str], str]:
    """What a stream releases for each piece, and at the end."""
    stream = ReplyStream()
    released = [stream.feed(piece) for piece in pieces]
    return released, stream.finish()


@pytest.mark.parametrize(
    ("pieces", "released", "rest"),
    [
        pytest.param(
            ["Hel", "lo", ",", " ", "owner."], ["Hel", "lo", ",", "", " owner."], "", id="plain"
        ),
        pytest.param([" ", "Hi", "\n"], ["", "Hi", ""], "", id="edge-whitespace"),
        pytest.param(
            ["Let me look. ", "<tool", "_call>", CALL, "</tool_call>", "\n"],
            ["Let me look.", "", "", "", "", ""],
            "",
            id="content-then-a-call",
        ),
        pytest.param(
            ["<tool_call>", CALL, "</tool_call>", " Done", "."],
            ["", "", "", "Done", "."],
            "",
            id="a-call-then-content",
        ),
        pytest.param(["```json\n", CALL, "\n```"], ["", "", ""], "", id="a-fenced-bare-call"),
        pytest.param([CALL[:5], CALL[5:]], ["", ""], "", id="a-bare-call"),
        pytest.param(["{", "not a call}"], ["", ""], "{not a call}", id="braces-at-the-end"),
        pytest.param(["Ends <tool_"], ["Ends"], " <tool_", id="a-half-opener-at-the-end"),
        pytest.param(["<tool_call>", "never closed"], ["", ""], "", id="an-unclosed-call"),
        pytest.param(["", "a"], ["", "a"], "", id="an-empty-piece"),
    ],
)
def test_a_stream_releases(pieces: list[str], released: list[str], rest: str) -> None:
    assert release(pieces) == (released, rest)


# --- properties ------------------------------------------------------------------------

ATOMS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "call>",
    "</",
    "<",
    ">",
    "{",
    "}",
    "{}",
    '"name"',
    ": ",
    '"clock"',
    '"arguments"',
    ",",
    CALL,
    "```",
    "```json",
    "json",
    "\n",
    " ",
    "\t",
    "a",
    "Hi",
    "é",
    "日本",
]
replies = st.lists(st.one_of(st.sampled_from(ATOMS), st.text(max_size=3)), max_size=12).map("".join)


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


cut_points = st.lists(st.integers(0, 400), max_size=40)


@settings(max_examples=2000, deadline=None)
@given(replies, cut_points)
@example(f" ok <tool_call>{CALL}</tool_call> done ", list(range(60)))
@example(f"```json\n{CALL}\n```", list(range(60)))
def test_any_split_releases_exactly_the_content(text: str, cuts: list[int]) -> None:
    """Any token split gives the same content in the end, and nothing released early is
    anything but content: never a tool call, never what a call's text turns out to be."""
    content = parse_reply(text).content
    stream = ReplyStream()
    so_far = ""
    for piece in pieces_of(text, cuts):
        so_far += stream.feed(piece)
        assert content.startswith(so_far), f"released {so_far!r} of {text!r}"
    assert so_far + stream.finish() == content
    if not content:
        assert so_far == ""


@settings(max_examples=2000, deadline=None)
@given(replies, replies)
def test_what_streams_survives_any_continuation(written: str, rest: str) -> None:
    assert parse_reply(written + rest).content.startswith(streamable(written))


plain = st.text(alphabet=st.characters(blacklist_characters="<{`"), max_size=40)


@settings(max_examples=500, deadline=None)
@given(plain, cut_points)
def test_text_that_cannot_be_a_call_streams_at_once(text: str, cuts: list[int]) -> None:
    """Holding back is only for what could be a call: other text waits only at its edges."""
    stream = ReplyStream()
    so_far, written = "", ""
    for piece in pieces_of(text, cuts):
        written += piece
        so_far += stream.feed(piece)
        assert so_far == written.strip()
