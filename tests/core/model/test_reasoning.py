"""A reply's reasoning kept apart from its answer: the module's rules, whole and streamed."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boxmaker.core.model.reasoning import ReasoningMarkers, ReasoningStream, Split, split_reasoning

THINK = ReasoningMarkers("<think>", "</think>")  # Qwen3, QwQ, DeepSeek-R1, Qwen3.5
CHANNEL = ReasoningMarkers("<|channel>", "<channel|>")  # Gemma 4's thought channel
QWEN_OPENERS = ("<tool_call>",)
GEMMA_OPENERS = ("<|tool_call>",)
CALL = '<tool_call>{"name": "clock", "arguments": {}}</tool_call>'
GEMMA_CALL = "<|tool_call>call:clock{}<tool_call|>"


def case(
    markers: ReasoningMarkers | None,
    opened: bool,
    text: str,
    reasoning: str,
    answer: str,
    *,
    id: str,
    openers: Sequence[str] = QWEN_OPENERS,
) -> object:
    return pytest.param(markers, opened, openers, text, Split(reasoning, answer), id=id)


def check(
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    text: str,
    expected: Split,
) -> None:
    """The whole reply splits as expected, and so does the same reply streamed a
    character at a time."""
    assert split_reasoning(text, markers, opened=opened, openers=openers) == expected
    reasoning, answer = released(markers, opened, openers, list(text))
    assert Split("".join(reasoning), "".join(answer)) == expected


SPLIT = ("markers", "opened", "openers", "text", "expected")


# --- rule 1: a closed block is reasoning -------------------------------------------------


@pytest.mark.parametrize(
    SPLIT,
    [
        case(
            THINK,
            False,
            f"<think>plan</think>Sure.{CALL}",
            "plan",
            f"Sure.{CALL}",
            id="a-closed-block-then-a-call",
        ),
        case(
            THINK,
            True,
            f"plan</think>\n{CALL}",
            "plan",
            f"\n{CALL}",
            id="a-block-the-prompt-opened-closed-then-a-call",
        ),
        case(
            THINK,
            True,
            f"maybe {CALL} no</think>Done.",
            f"maybe {CALL} no",
            "Done.",
            id="a-call-inside-a-closed-block-is-reasoning",
        ),
        case(
            THINK,
            False,
            f"<think>{CALL}</think>",
            CALL,
            "",
            id="a-call-inside-the-models-own-closed-block",
        ),
        case(
            THINK,
            False,
            "<think>hmm</think>Hi",
            "hmm",
            "Hi",
            id="the-model-opens-its-own-block",
        ),
        case(
            THINK,
            False,
            "Hi <think>hmm</think> there",
            "hmm",
            "Hi  there",
            id="a-block-in-the-middle",
        ),
        case(
            THINK,
            False,
            "<think>a</think>b<think>c</think>d",
            "ac",
            "bd",
            id="several-blocks",
        ),
        case(
            THINK,
            True,
            "a</think>b<think>c</think>d",
            "ac",
            "bd",
            id="several-blocks-the-first-opened-by-the-prompt",
        ),
        case(
            THINK,
            False,
            "<think>only thinking</think>",
            "only thinking",
            "",
            id="only-reasoning-closed",
        ),
        case(THINK, False, "<think></think>Hi", "", "Hi", id="an-empty-block"),
        case(
            THINK,
            True,
            "a<think>b</think>c",
            "a<think>b",
            "c",
            id="an-opening-marker-inside-a-block-is-text",
        ),
        case(
            CHANNEL,
            False,
            f"<|channel>thought\nplan<channel|>Hi{GEMMA_CALL}",
            "thought\nplan",
            f"Hi{GEMMA_CALL}",
            openers=GEMMA_OPENERS,
            id="gemma-4-a-closed-channel-then-a-call",
        ),
        case(
            CHANNEL,
            False,
            f"<|channel>thought\n{GEMMA_CALL}<channel|>Done.",
            f"thought\n{GEMMA_CALL}",
            "Done.",
            openers=GEMMA_OPENERS,
            id="gemma-4-a-call-inside-a-closed-channel",
        ),
    ],
)
def test_a_closed_block_is_reasoning(
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    text: str,
    expected: Split,
) -> None:
    check(markers, opened, openers, text, expected)


# --- rule 2: an unclosed block ends at a call --------------------------------------------


@pytest.mark.parametrize(
    SPLIT,
    [
        case(
            THINK,
            True,
            f"plan\n{CALL}",
            "plan\n",
            CALL,
            id="qwen3.5-opened-by-the-prompt-never-closed-then-a-call",
        ),
        case(
            THINK,
            False,
            f"<think>plan{CALL}",
            "plan",
            CALL,
            id="the-models-own-block-never-closed-then-a-call",
        ),
        case(
            THINK,
            True,
            "just thinking",
            "just thinking",
            "",
            id="only-reasoning-never-closed",
        ),
        case(THINK, False, "<think>hmm", "hmm", "", id="only-reasoning-the-model-opened"),
        case(THINK, True, "", "", "", id="nothing-yet-in-an-opened-block"),
        case(
            THINK,
            True,
            f"a{CALL}b{CALL}",
            "a",
            f"{CALL}b{CALL}",
            id="the-first-call-ends-the-block",
        ),
        case(
            THINK,
            True,
            f"a{CALL}<think>b",
            "a",
            f"{CALL}<think>b",
            id="all-after-the-call-is-the-answer",
        ),
        case(
            THINK,
            True,
            "a <tool_call",
            "a <tool_call",
            "",
            id="a-half-written-opener-is-not-a-call",
        ),
        case(
            THINK,
            True,
            "a </tool_call> b",
            "a </tool_call> b",
            "",
            id="a-closer-is-not-an-opener",
        ),
        case(
            THINK,
            False,
            f"<think>a</think>b<think>c{CALL}",
            "ac",
            f"b{CALL}",
            id="a-closed-block-then-an-unclosed-one-then-a-call",
        ),
        case(
            CHANNEL,
            False,
            f"<|channel>thought\nplan{GEMMA_CALL}",
            "thought\nplan",
            GEMMA_CALL,
            openers=GEMMA_OPENERS,
            id="gemma-4-an-unclosed-channel-then-a-call",
        ),
        case(
            CHANNEL,
            False,
            "<|channel>a<tool_call>b",
            "a<tool_call>b",
            "",
            openers=GEMMA_OPENERS,
            id="gemma-4-another-syntaxs-opener-is-not-a-call",
        ),
    ],
)
def test_an_unclosed_block_ends_at_a_call(
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    text: str,
    expected: Split,
) -> None:
    check(markers, opened, openers, text, expected)


# --- rule 3: outside a block, everything is the answer -----------------------------------


@pytest.mark.parametrize(
    SPLIT,
    [
        case(
            None,
            False,
            f"<think>a</think>b{CALL}",
            "",
            f"<think>a</think>b{CALL}",
            id="no-markers-everything-is-the-answer",
        ),
        case(
            None,
            True,
            "a</think>b",
            "",
            "a</think>b",
            id="no-markers-even-when-opened",
        ),
        case(
            None,
            False,
            "Ends <tool_",
            "",
            "Ends <tool_",
            id="no-markers-a-half-opener-at-the-end",
        ),
        case(THINK, False, f"Hi {CALL}", "", f"Hi {CALL}", id="no-block-a-call-in-the-answer"),
        case(THINK, False, "", "", "", id="an-empty-reply"),
        case(
            THINK,
            False,
            "a</think>b",
            "",
            "a</think>b",
            id="a-stray-close-with-no-block-open-is-text",
        ),
        case(
            THINK,
            False,
            "<think>a</think>b</think>c",
            "a",
            "b</think>c",
            id="a-second-close-after-a-block-is-text",
        ),
        case(
            THINK,
            False,
            "Price <thin",
            "",
            "Price <thin",
            id="a-half-opening-marker-at-the-end-is-text",
        ),
        case(
            CHANNEL,
            False,
            "a<channel|>b",
            "",
            "a<channel|>b",
            openers=GEMMA_OPENERS,
            id="gemma-4-a-stray-close-is-text",
        ),
        case(
            CHANNEL,
            False,
            "<think>a</think>b",
            "",
            "<think>a</think>b",
            openers=GEMMA_OPENERS,
            id="gemma-4-another-models-markers-are-text",
        ),
    ],
)
def test_outside_a_block_everything_is_the_answer(
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    text: str,
    expected: Split,
) -> None:
    check(markers, opened, openers, text, expected)


# --- the stream --------------------------------------------------------------------------


def released(
    markers: ReasoningMarkers | None, opened: bool, openers: Sequence[str], pieces: list[str]
) -> tuple[list[str], list[str]]:
    """The reasoning and answer pieces a stream releases for each piece, then at the end."""
    stream = ReasoningStream(markers, opened=opened, openers=openers)
    out = [stream.feed(piece) for piece in pieces]
    out.append(stream.finish())
    return [r for r, _ in out], [a for _, a in out]


@pytest.mark.parametrize(
    ("markers", "opened", "pieces", "reasoning", "answer"),
    [
        pytest.param(
            THINK,
            True,
            ["pl", "an", "</thi", "nk>", "Hi"],
            ["pl", "an", "", "", "", ""],
            ["", "", "", "", "Hi", ""],
            id="a-close-half-written-waits",
        ),
        pytest.param(
            THINK,
            True,
            ["plan\n", "<tool", "_call>", "{}", "</tool_call>"],
            ["plan\n", "", "", "", "", ""],
            ["", "", "", "", "", "<tool_call>{}</tool_call>"],
            id="a-call-in-an-unclosed-block-waits-for-the-end",
        ),
        pytest.param(
            THINK,
            True,
            ["a", "<tool_call>", "b", "</think>", "c"],
            ["a", "", "", "<tool_call>b", "", ""],
            ["", "", "", "", "c", ""],
            id="a-close-after-a-call-makes-it-reasoning",
        ),
        pytest.param(
            THINK,
            False,
            ["Hi ", "<th", "ink>", "x"],
            ["", "", "", "x", ""],
            ["Hi ", "", "", "", ""],
            id="an-opening-marker-half-written-waits",
        ),
        pytest.param(
            None,
            False,
            ["a", "<tool_", "call>"],
            ["", "", "", ""],
            ["a", "", "<tool_call>", ""],
            id="no-markers",
        ),
    ],
)
def test_a_stream_releases(
    markers: ReasoningMarkers | None,
    opened: bool,
    pieces: list[str],
    reasoning: list[str],
    answer: list[str],
) -> None:
    assert released(markers, opened, QWEN_OPENERS, pieces) == (reasoning, answer)


def is_open(
    markers: ReasoningMarkers | None, opened: bool, openers: Sequence[str], text: str
) -> bool:
    stream = ReasoningStream(markers, opened=opened, openers=openers)
    stream.feed(text)
    return stream.reasoning_open


@pytest.mark.parametrize(
    ("markers", "opened", "openers", "text", "expected"),
    [
        pytest.param(THINK, True, QWEN_OPENERS, "", True, id="opened-by-the-prompt-nothing-yet"),
        pytest.param(THINK, True, QWEN_OPENERS, "plan", True, id="inside-an-opened-block"),
        pytest.param(THINK, False, QWEN_OPENERS, "<think>hm", True, id="inside-the-models-block"),
        pytest.param(THINK, True, QWEN_OPENERS, "a</thi", True, id="a-close-half-written"),
        pytest.param(THINK, True, QWEN_OPENERS, "a<tool_ca", True, id="an-opener-half-written"),
        pytest.param(THINK, True, QWEN_OPENERS, "a</think>", False, id="after-the-close"),
        pytest.param(
            THINK, False, QWEN_OPENERS, "<think>a</think>b", False, id="after-the-models-close"
        ),
        pytest.param(
            THINK, True, QWEN_OPENERS, "a<tool_call>", False, id="after-a-call-opener-unclosed"
        ),
        pytest.param(
            THINK,
            True,
            QWEN_OPENERS,
            "a<tool_call>b</think>",
            False,
            id="after-a-call-then-a-close",
        ),
        pytest.param(
            THINK,
            False,
            QWEN_OPENERS,
            "<think>a<tool_call>b</think>c<think>d",
            True,
            id="a-call-in-an-earlier-closed-block-does-not-count",
        ),
        pytest.param(
            THINK,
            False,
            QWEN_OPENERS,
            f"{CALL}<think>d",
            True,
            id="a-call-in-the-answer-before-the-block-does-not-count",
        ),
        pytest.param(THINK, False, QWEN_OPENERS, "", False, id="not-opened-nothing-yet"),
        pytest.param(THINK, False, QWEN_OPENERS, "a</think>", False, id="a-stray-close"),
        pytest.param(None, True, QWEN_OPENERS, "plan", False, id="no-markers-opened"),
        pytest.param(None, False, QWEN_OPENERS, "<think>a", False, id="no-markers"),
        pytest.param(CHANNEL, False, GEMMA_OPENERS, "<|channel>thought", True, id="gemma-4-inside"),
        pytest.param(
            CHANNEL, False, GEMMA_OPENERS, "<|channel>a<channel|>", False, id="gemma-4-closed"
        ),
        pytest.param(
            CHANNEL,
            False,
            GEMMA_OPENERS,
            "<|channel>a<|tool_call>",
            False,
            id="gemma-4-after-a-call-opener",
        ),
        pytest.param(
            CHANNEL,
            False,
            GEMMA_OPENERS,
            "<|channel>a<tool_call>",
            True,
            id="gemma-4-another-syntaxs-opener",
        ),
    ],
)
def test_reasoning_open(
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    text: str,
    expected: bool,
) -> None:
    assert is_open(markers, opened, openers, text) is expected


# --- properties ------------------------------------------------------------------------

Style = tuple[ReasoningMarkers | None, tuple[str, ...]]
QWEN: Style = (THINK, QWEN_OPENERS)
GEMMA: Style = (CHANNEL, GEMMA_OPENERS)
PLAIN: Style = (None, QWEN_OPENERS)
styles = st.sampled_from([QWEN, GEMMA, PLAIN])
marked_styles = st.sampled_from([QWEN, GEMMA])

DRAFTED = "drafted"  # the name of a call written only inside a closed block
DRAFTS = {
    THINK: '<tool_call>{"name": "drafted", "arguments": {}}</tool_call>',
    CHANNEL: "<|tool_call>call:drafted{}<tool_call|>",
}

ATOMS = [
    "<think>",
    "</think>",
    "<thi",
    "nk>",
    "</",
    "<|channel>",
    "<channel|>",
    "<|",
    "|>",
    "channel",
    "<",
    ">",
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "call>",
    "<|tool_call>",
    "<tool_call|>",
    CALL,
    GEMMA_CALL,
    "thought\n",
    "\n",
    " ",
    "a",
    "é",
    "日本",
]
soup = st.lists(st.one_of(st.sampled_from(ATOMS), st.text(max_size=3)), max_size=10).map("".join)
replies = st.lists(st.one_of(st.sampled_from(ATOMS), st.text(max_size=3)), max_size=16).map("".join)
cut_points = st.lists(st.integers(0, 300), max_size=40)


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=2000, deadline=None)
@given(styles, st.booleans(), replies, cut_points)
@example(QWEN, True, f"plan\n{CALL}", list(range(80)))
@example(QWEN, False, f"<think>a{CALL}b</think>c<think>d{CALL}", list(range(80)))
@example(GEMMA, False, f"<|channel>a{GEMMA_CALL}<channel|>b<|channel>c", list(range(80)))
def test_any_split_releases_the_whole_split(
    style: Style, opened: bool, text: str, cuts: list[int]
) -> None:
    """(1) Whatever the pieces, the reasoning and answer released add up to the split."""
    markers, openers = style
    reasoning, answer = released(markers, opened, openers, pieces_of(text, cuts))
    whole = split_reasoning(text, markers, opened=opened, openers=openers)
    assert "".join(reasoning) == whole.reasoning
    assert "".join(answer) == whole.answer


@settings(max_examples=2000, deadline=None)
@given(styles, st.booleans(), replies, cut_points)
@example(QWEN, True, f"a{CALL}b</think>c", list(range(80)))
def test_what_is_released_is_always_a_prefix(
    style: Style, opened: bool, text: str, cuts: list[int]
) -> None:
    """(2) Nothing released early is taken back: after every piece, each side released so
    far begins the final split's side."""
    markers, openers = style
    whole = split_reasoning(text, markers, opened=opened, openers=openers)
    stream = ReasoningStream(markers, opened=opened, openers=openers)
    reasoning, answer = "", ""
    for piece in pieces_of(text, cuts):
        more_reasoning, more_answer = stream.feed(piece)
        reasoning += more_reasoning
        answer += more_answer
        assert whole.reasoning.startswith(reasoning), f"reasoning {reasoning!r} of {text!r}"
        assert whole.answer.startswith(answer), f"answer {answer!r} of {text!r}"


@settings(max_examples=2000, deadline=None)
@given(styles, st.booleans(), replies, cut_points)
def test_reasoning_open_is_whether_more_text_would_be_reasoning(
    style: Style, opened: bool, text: str, cuts: list[int]
) -> None:
    """After every piece, `reasoning_open` says whether a character written next (one
    that completes no marker) would be reasoning."""
    markers, openers = style
    stream = ReasoningStream(markers, opened=opened, openers=openers)
    for piece in pieces_of(text, cuts):
        stream.feed(piece)
        now = split_reasoning(stream.text, markers, opened=opened, openers=openers)
        more = split_reasoning(stream.text + "§", markers, opened=opened, openers=openers)
        # the probe went to the reasoning (the text may hold a § of its own, anywhere)
        went = more.reasoning.count("§") > now.reasoning.count("§")
        assert stream.reasoning_open is went, stream.text


@dataclass(frozen=True, slots=True)
class Built:
    """A reply assembled from known parts, and the split the rules give it."""

    markers: ReasoningMarkers
    openers: tuple[str, ...]
    opened: bool
    text: str
    expected: Split


@st.composite
def built_replies(draw: st.DrawFn) -> Built:
    """Answer text, closed blocks (some holding a drafted call) and, perhaps, a last
    block left unclosed, joined by the markers."""
    markers, openers = draw(marked_styles)
    assert markers is not None
    draft = DRAFTS[markers]
    answer_text = soup.filter(lambda s: markers.open not in s and DRAFTED not in s)
    unclosed_body = soup.filter(lambda s: markers.close not in s and DRAFTED not in s)
    closed_body = st.one_of(
        soup, st.tuples(soup, soup).map(lambda parts: parts[0] + draft + parts[1])
    ).filter(lambda s: markers.close not in s)
    opened = draw(st.booleans())
    inside = opened
    text: list[str] = []
    reasoning: list[str] = []
    answer: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        if inside:
            body = draw(closed_body)
            text += [body, markers.close]
            reasoning.append(body)
        else:
            said = draw(answer_text)
            text += [said, markers.open]
            answer.append(said)
        inside = not inside
    if inside:
        body = draw(unclosed_body)
        found = [at for at in (body.find(opener) for opener in openers) if at >= 0]
        call = min(found, default=len(body))
        text.append(body)
        reasoning.append(body[:call])
        answer.append(body[call:])
    else:
        said = draw(answer_text)
        text.append(said)
        answer.append(said)
    expected = Split("".join(reasoning), "".join(answer))
    return Built(markers, openers, opened, "".join(text), expected)


@settings(max_examples=500, deadline=None)
@given(built_replies(), cut_points)
def test_a_reply_built_from_parts_splits_as_the_rules_say(built: Built, cuts: list[int]) -> None:
    """Against an oracle: the reply's own parts say which side each falls on."""
    whole = split_reasoning(built.text, built.markers, opened=built.opened, openers=built.openers)
    assert whole == built.expected
    reasoning, answer = released(
        built.markers, built.opened, built.openers, pieces_of(built.text, cuts)
    )
    assert Split("".join(reasoning), "".join(answer)) == built.expected


@settings(max_examples=500, deadline=None)
@given(built_replies(), cut_points)
@example(
    Built(
        THINK,
        QWEN_OPENERS,
        True,
        f"a{DRAFTS[THINK]}b</think>c",
        Split(f"a{DRAFTS[THINK]}b", "c"),
    ),
    list(range(80)),
)
@example(
    Built(
        CHANNEL,
        GEMMA_OPENERS,
        False,
        f"<|channel>{DRAFTS[CHANNEL]}<channel|>",
        Split(DRAFTS[CHANNEL], ""),
    ),
    list(range(80)),
)
def test_a_call_drafted_in_a_closed_block_is_never_released_as_answer(
    built: Built, cuts: list[int]
) -> None:
    """(3) Never, not even for a moment while the block is still open."""
    stream = ReasoningStream(built.markers, opened=built.opened, openers=built.openers)
    answer = ""
    for piece in pieces_of(built.text, cuts):
        answer += stream.feed(piece)[1]
        assert DRAFTED not in answer, f"released {answer!r} of {built.text!r}"
    answer += stream.finish()[1]
    assert DRAFTED not in answer, f"released {answer!r} of {built.text!r}"
