"""Streaming a reply: only what no continuation can turn into a tool call goes out early."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from boxmaker.core.model.reply_stream import ReplyStream, streamable
from boxmaker.core.model.tool_calls import CallSyntax, Reply, ToolCall, call_openers, parse_reply

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


# --- every syntax ----------------------------------------------------------------------

S = CallSyntax
DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001
DS_CALL, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"  # noqa: RUF001
DS_SEP = "<｜tool▁sep｜>"  # noqa: RUF001
Q = '<|"|>'
XML_CALL = "<tool_call>\n<function=clock>\n</function>\n</tool_call>"
LLAMA_CALL = '{"name": "clock", "parameters": {}}'
DS_BLOCK = (
    f"{DS_CALLS}{DS_CALL}function{DS_SEP}clock\n```json\n{{}}\n```{DS_CALL_END}{DS_CALLS_END}"
)
GEMMA_CALL = "<|tool_call>call:clock{}<tool_call|>"


@pytest.mark.parametrize(
    ("syntax", "text", "expected"),
    [
        pytest.param(S.TAGGED_JSON, "{", "{", id="tagged-has-no-bare-form"),
        pytest.param(S.TAGGED_JSON, "Hi <tool_", "Hi", id="tagged-half-opener"),
        pytest.param(S.XML, "Hi\n<tool_call>\n<function=clock>", "Hi", id="xml-open-call"),
        pytest.param(S.XML, f"a {XML_CALL} b <tool_call", "a", id="xml-after-a-call-waits"),
        pytest.param(S.XML, "<func", "", id="xml-bare-function-may-open"),
        pytest.param(S.XML, "<fund", "<fund", id="xml-not-a-function"),
        pytest.param(S.LLAMA3_JSON, "", "", id="llama-nothing-yet"),
        pytest.param(S.LLAMA3_JSON, " {", "", id="llama-a-brace"),
        pytest.param(S.LLAMA3_JSON, "<|pyt", "", id="llama-python-tag-half-written"),
        pytest.param(S.LLAMA3_JSON, "<|python_tag|>", "", id="llama-python-tag"),
        pytest.param(S.LLAMA3_JSON, '<|python_tag|>{"name"', "", id="llama-after-python-tag"),
        pytest.param(S.LLAMA3_JSON, "<|pyx", "<|pyx", id="llama-not-the-python-tag"),
        pytest.param(S.LLAMA3_JSON, "It is {noon} <", "It is {noon} <", id="llama-text-is-all-content"),
        pytest.param(S.LLAMA3_JSON, "```json\n{", "```json\n{", id="llama-has-no-fence"),
        pytest.param(S.MISTRAL, "Checking [", "Checking", id="mistral-a-bracket-waits"),
        pytest.param(S.MISTRAL, "Checking [TOOL_CA", "Checking", id="mistral-half-opener"),
        pytest.param(S.MISTRAL, "a [b] c", "a [b] c", id="mistral-brackets-in-text"),
        pytest.param(S.MISTRAL, 'Ok [TOOL_CALLS][{"name": "clock", "arguments": {}}] more', "Ok", id="mistral-runs-to-the-end"),
        pytest.param(S.DEEPSEEK_R1, "Let me <｜tool", "Let me", id="deepseek-half-opener"),  # noqa: RUF001
        pytest.param(S.DEEPSEEK_R1, f"a {DS_CALLS}{DS_CALL}", "a", id="deepseek-open-block"),
        pytest.param(S.DEEPSEEK_R1, f"a {DS_BLOCK} b", "a  b", id="deepseek-after-a-block"),
        pytest.param(S.GEMMA4, "Sure <|tool", "Sure", id="gemma-half-opener"),
        pytest.param(S.GEMMA4, "Sure <|tool_call>call:clock{", "Sure", id="gemma-open-call"),
        pytest.param(S.GEMMA4, f"Sure {GEMMA_CALL} done <tool_call|>", "Sure  done <tool_call|>", id="gemma-after-a-call"),
        pytest.param(S.GEMMA4, "x <tool_call>", "x <tool_call>", id="gemma-other-tags-are-text"),
        pytest.param(S.BARE_JSON, "```json\n{", "", id="bare-fenced-brace"),
        pytest.param(S.BARE_JSON, "Hi <tool_call>", "Hi <tool_call>", id="bare-tags-are-text"),
        pytest.param(S.BARE_JSON, "{ x } <tool_call>", "", id="bare-braces-still-wait"),
    ],
)  # fmt: skip
def test_what_is_streamable_in(syntax: CallSyntax, text: str, expected: str) -> None:
    assert streamable(text, syntax) == expected


SYNTAX_ATOMS = [
    "<function=clock>", "</function>", "<parameter=k>", "</parameter>", "<|python_tag|>", "<|py",
    '"parameters"', "[TOOL_CALLS]", "[TOOL_", "[ARGS]", "[", "]", DS_CALLS, DS_CALLS_END, DS_CALL,
    DS_CALL_END, DS_SEP, "<｜tool▁", "function", "<|tool_call>", "<tool_call|>", "<|tool", "call:",  # noqa: RUF001
    Q, XML_CALL, LLAMA_CALL, DS_BLOCK, GEMMA_CALL, ";",
]  # fmt: skip
any_replies = st.lists(
    st.one_of(st.sampled_from(ATOMS + SYNTAX_ATOMS), st.text(max_size=3)), max_size=12
).map("".join)
syntaxes = st.sampled_from([None, *CallSyntax])


@settings(max_examples=1000, deadline=None)
@given(syntaxes, any_replies, cut_points)
def test_any_split_releases_exactly_the_content_in_every_syntax(
    syntax: CallSyntax | None, text: str, cuts: list[int]
) -> None:
    content = parse_reply(text, syntax).content
    stream = ReplyStream(syntax)
    so_far = ""
    for piece in pieces_of(text, cuts):
        so_far += stream.feed(piece)
        assert content.startswith(so_far), f"released {so_far!r} of {text!r}"
    assert so_far + stream.finish() == content


@settings(max_examples=1000, deadline=None)
@given(syntaxes, any_replies, any_replies)
def test_what_streams_survives_any_continuation_in_every_syntax(
    syntax: CallSyntax | None, written: str, rest: str
) -> None:
    assert parse_reply(written + rest, syntax).content.startswith(streamable(written, syntax))


# --- replies made of text and calls, in every syntax -------------------------------------

Arguments = dict[str, Any]
names = st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True)
keys = st.from_regex(r"[a-z]{1,6}", fullmatch=True)
# No `<` and no backtick in values: those could close a call's span or fence early.
value_text = st.text(alphabet='ab é\n{}[]:;,"\\/=|', max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | value_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6,
)
json_arguments = st.dictionaries(keys, json_values, max_size=3)
# Content: the openers' first characters appear, so half-written openers are held.
text_parts = st.lists(
    st.sampled_from(["a", "Hi", " ", "\n", "é", ".", "<", "<tool_", "<|", "[", "[TOOL_", "|>", "]",
                     "<｜tool▁", "`", "}", "tool_call>"]),  # noqa: RUF001
    max_size=6,
).map("".join)  # fmt: skip


def compact(arguments: Arguments) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def gemma_value(value: Any) -> str:
    """`value` as Gemma 4's template writes it (`format_argument`)."""
    if isinstance(value, str):
        return Q + value + Q
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return str(value)


def render_span_call(syntax: CallSyntax | None, name: str, arguments: Arguments) -> str:
    """One call as `syntax` writes it (xml arguments are text values)."""
    if syntax is S.XML:
        inner = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{inner}</function>\n</tool_call>"
    if syntax is S.GEMMA4:
        return f"<|tool_call>call:{name}{gemma_value(arguments)}<tool_call|>"
    if syntax is S.DEEPSEEK_R1:
        body = json.dumps(arguments, ensure_ascii=False)
        return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{body}\n```{DS_CALL_END}"
    if syntax is S.PHI4:
        return f"<|tool_call|>{json.dumps({'name': name, 'arguments': arguments})}<|/tool_call|>"
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@st.composite
def calls_for(draw: st.DrawFn, syntax: CallSyntax | None) -> list[tuple[str, Arguments]]:
    arguments = st.dictionaries(keys, value_text, max_size=3) if syntax is S.XML else json_arguments
    return draw(st.lists(st.tuples(names, arguments), min_size=1, max_size=3))


@st.composite
def replies_in(draw: st.DrawFn, syntax: CallSyntax | None) -> tuple[str, str, tuple[ToolCall, ...]]:
    """A reply written in `syntax`, its content, and its calls."""
    texts = [draw(text_parts)]
    groups: list[list[tuple[str, Arguments]]] = []
    if syntax is S.LLAMA3_JSON or syntax is S.BARE_JSON:  # calls or text, never both
        if draw(st.booleans()):
            texts = [draw(text_parts.filter(lambda t: "{" not in t))]
        else:
            groups, texts = [draw(calls_for(syntax))], ["", ""]
    elif syntax is S.MISTRAL:  # text, then calls to the end
        if draw(st.booleans()):
            groups, texts = [draw(calls_for(syntax))], [texts[0], ""]
    else:
        for _ in range(draw(st.integers(0, 3))):
            groups.append(draw(calls_for(syntax)))
            texts.append(draw(text_parts))
    openers = [o for o in call_openers(syntax) if o not in ("{", "```")] or ["\0"]
    assume(not any(opener in text for text in texts for opener in openers))
    reply = texts[0]
    for group, text in zip(groups, texts[1:], strict=True):
        reply += render_group(draw, syntax, group) + text
    calls = tuple(ToolCall(n, compact(a)) for group in groups for n, a in group)
    return reply, "".join(texts).strip(), calls


def render_group(draw: st.DrawFn, syntax: CallSyntax | None, group: list[tuple[str, Any]]) -> str:
    """Calls that follow one another in the reply, as `syntax` writes them."""
    if syntax is S.LLAMA3_JSON:
        between = draw(st.sampled_from([";", "\n", "; "]))
        objects = between.join(json.dumps({"name": n, "parameters": a}) for n, a in group)
        return draw(st.sampled_from(["", " ", "<|python_tag|>"])) + objects
    if syntax is S.BARE_JSON:
        lines = "\n".join(json.dumps({"name": n, "arguments": a}) for n, a in group)
        return draw(st.sampled_from([lines, f"```json\n{lines}\n```", f"\n{lines}\n"]))
    if syntax is S.MISTRAL:
        if draw(st.booleans()):
            return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in group])
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in group)
    if syntax is S.DEEPSEEK_R1:  # whitespace between calls is inside the block
        inside = draw(st.sampled_from(["", "\n"]))
        return (
            DS_CALLS + inside.join(render_span_call(syntax, n, a) for n, a in group) + DS_CALLS_END
        )
    return "".join(render_span_call(syntax, n, a) for n, a in group)


@pytest.mark.parametrize("syntax", [None, *CallSyntax], ids=lambda s: str(s or "default"))
@settings(max_examples=120, deadline=None)
@given(data=st.data(), cuts=cut_points)
def test_a_reply_of_text_and_calls_streams_its_text_and_reads_its_calls(
    syntax: CallSyntax | None, data: st.DataObject, cuts: list[int]
) -> None:
    """Any split of a reply into pieces releases exactly its text, never a byte of a call,
    and the reply reads as exactly the calls that were written, in order."""
    reply, content, calls = data.draw(replies_in(syntax))
    assert parse_reply(reply, syntax) == Reply(content=content, calls=calls)
    stream = ReplyStream(syntax)
    so_far = ""
    for piece in pieces_of(reply, cuts):
        so_far += stream.feed(piece)
        assert content.startswith(so_far), f"released {so_far!r} of {reply!r}"
    assert so_far + stream.finish() == content
