"""Replies that cannot leak (003 section 9): the escaping rules, then properties checked
against the independent fetch simulator."""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.display.markdown_scan import leaks
from boxmaker.core.display.reply_escape import NOTICE, EscapedReply, escape_reply
from boxmaker.testing.fetch_simulator import fetches

CLEAN = {"unsafe_links": "false"}


def _props(reply: EscapedReply) -> dict[str, object]:
    return {"unsafe_links": "true" if reply.unsafe_links else "false"}


def _shown(message: str) -> str:
    """`message` with its escapes undone: backslashes before ASCII punctuation, references."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", message))


def _without_markup(text: str) -> str:
    return re.sub(r"[`\s\\]", "", text)


def _kept(original: str, message: str) -> bool:
    """Every character of `original` but backticks, spaces and its fence lines is shown by
    `message`, in order."""
    rest = iter(_without_markup(_shown(message)))
    text = re.sub(r"^ {0,3}(?:`{3,}|~{3,}).*$", "", original, flags=re.MULTILINE)
    return all(char in rest for char in _without_markup(text))


IMAGES = [
    pytest.param("![a](http://i/x.png)", id="inline"),
    pytest.param('![a](http://i/x.png "title")', id="title"),
    pytest.param("![a](<http://i/x y.png>)", id="angle-destination"),
    pytest.param("![a][r]\n\n[r]: http://i/x.png", id="full-reference"),
    pytest.param("![r][]\n\n[r]: http://i/x.png", id="collapsed-reference"),
    pytest.param("![r]\n\n[r]: http://i/x.png", id="shortcut-reference"),
    pytest.param("[r]: http://i/x.png\n\n![R]", id="definition-first-case-folded"),
    pytest.param("[![a](http://i/x.png)](http://link)", id="image-in-link"),
    pytest.param("![a [b] c](http://i/x.png)", id="nested-brackets"),
    pytest.param("![a`b``c](http://i/x.png)", id="backticks-in-alt"),
    pytest.param("![a](http://i/x`y.png)", id="backtick-in-url"),
    pytest.param("![a\nb](http://i/x.png)", id="alt-over-two-lines"),
    pytest.param("![a](\nhttp://i/x.png\n't')", id="destination-on-next-line"),
    pytest.param("> quote ![a](http://i/x.png)", id="blockquote"),
    pytest.param("- item ![a](http://i/x.png)", id="list"),
    pytest.param(
        "| h | i |\n|---|---|\n| ![a](http://i/x.png) | `x|![b](http://i/y)` |", id="table-cell"
    ),
    pytest.param("![a](http://i/x.png)\r\n![b](http://i/y.png)", id="crlf"),
    pytest.param("ünï ![ça](http://i/é.png) 😀", id="unicode"),
    pytest.param("x ````` ![a](http://i/x.png)", id="long-backtick-run"),
    pytest.param("x `a ![a](http://i/x.png)", id="unmatched-backtick-before"),
    pytest.param("\\` ![a](http://i/x.png) `", id="escaped-backtick"),
    pytest.param("a\\\\![a](http://i/x.png)", id="backslash-before"),
]


@pytest.mark.parametrize("text", IMAGES)
@pytest.mark.parametrize("untrusted", [False, True], ids=["clean", "untrusted"])
def test_every_image_ends_up_in_code(text: str, untrusted: bool) -> None:
    assert fetches(text, CLEAN, previews=False), "the case must fetch an image unescaped"
    reply = escape_reply(text, untrusted)
    assert not reply.fenced, reply.message
    assert fetches(reply.message, CLEAN, previews=False) == []
    # nor is its URL previewed (the server previews a clean reply's first plain URL)
    assert [url for url in fetches(reply.message, CLEAN) if "//i/" in url] == []
    assert not leaks(reply.message, links=False)
    assert _kept(text, reply.message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("![a](u)", "\\!\\[a\\]\\(u\\)", id="image"),
        pytest.param("`x` ![a](u)", "`x` \\!\\[a\\]\\(u\\)", id="inert-span-kept"),
        pytest.param("`![a](u)`", "&grave;\\!\\[a\\]\\(u\\)&grave;", id="span-of-an-image-escaped"),
        pytest.param(
            "``a`b``", "&grave;&grave;a&grave;b&grave;&grave;", id="span-with-a-backtick-escaped"
        ),
        pytest.param("`a_b` `_a_`", "`a_b` &grave;_a_&grave;", id="underscore-only-inside-a-word"),
        pytest.param("```\n![a](u)\n```", "```\n![a](u)\n```", id="fenced-code-untouched"),
        pytest.param("~~~py\n```\n~~~", "````py\n```\n````", id="fence-made-canonical"),
        pytest.param("```\nopen", "```\nopen\n```", id="open-fence-closed"),
        pytest.param("x\n```sh x\ny", "x\n\nsh x\n\n```\ny\n```", id="info-string-shown"),
        pytest.param("    ![a](u)", "&#32;   \\!\\[a\\]\\(u\\)", id="no-indented-code"),
        pytest.param("\\!\\[a](u)", "&bsol;\\!&bsol;\\[a\\]\\(u\\)", id="backslashes-shown"),
        pytest.param("<img src=x>", "&lt;img src=x>", id="html-img-tag"),
        pytest.param("&lt; & $x$", "&amp;lt; & $x$", id="references-shown"),
        pytest.param("1. a\n- b **c**", "1\\. a\n- b **c**", id="formatting-kept"),
        pytest.param("a\r\nb", "a\nb", id="crlf"),
        pytest.param("", "", id="empty"),
    ],
)
def test_clean_output(text: str, message: str) -> None:
    assert escape_reply(text, untrusted=False) == EscapedReply(message, unsafe_links=False)


# --- the rules of core.display.reply_lines: what a line's place among the others asks of it ---


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a\n===", "a\n&#61;==", id="setext-underline-shown"),
        pytest.param("a\n- ", "a\n&#45; ", id="one-dash-underline"),
        pytest.param("> a\n> =-=", "> a\n> &#61;-=", id="mixed-underline-in-a-quote"),
        pytest.param("a\n\n---", "a\n\n---", id="thematic-break-after-a-blank-line"),
        pytest.param(">     a", ">&#32;    a", id="code-in-a-quote"),
        pytest.param(">    a", ">    a", id="four-after-a-quote-marker-is-no-code"),
        pytest.param("-     a", "-&#32;    a", id="code-after-a-list-marker"),
        pytest.param("> -      a", "> -&#32;     a", id="code-in-a-list-in-a-quote"),
        pytest.param(">\t\ta", ">&#9;\ta", id="tabs-after-a-quote-marker"),
        pytest.param("# a\n\n## b", "# a\n\n## b", id="headings-kept"),
        pytest.param("<div>\n\n# a", "&lt;div>\n\n\\# a", id="no-heading-after-html"),
        pytest.param("> ```\n> # a", "> &grave;&grave;&grave;\n> \\# a", id="after-a-text-fence"),
        pytest.param("```\nx\n```\n# a", "```\nx\n```\n\n# a", id="after-a-plain-block"),
        pytest.param(
            "~~~ a~\n~~~\n# a", "a\\~\n\n```\n```\n\n\\# a", id="after-a-block-marked-reads-not"
        ),
        pytest.param("```\n```~\n```\n# a", "````\n```~\n````\n\n\\# a", id="marked-ends-it-early"),
        pytest.param(
            "![x][r]\n[r]: http://i/x.png 't'",
            "\\!\\[x\\]\\[r\\]\n\\[r\\]: http&#58;&#47;&#47;i&#47;x\\.png 't'",
            id="definition-of-a-reply-with-an-image",
        ),
        pytest.param(
            "![r]\n[r]:\n  http://i/x.png\nhttp://x.example",
            "\\!\\[r\\]\n\\[r\\]:\n  http&#58;&#47;&#47;i&#47;x\\.png\nhttp://x.example",
            id="destination-on-the-next-line",
        ),
        pytest.param(
            "![a](\nhttp://i/x.png) http://x.example",
            "\\!\\[a\\]\\(\nhttp&#58;&#47;&#47;i&#47;x\\.png\\) http://x.example",
            id="destination-over-two-lines",
        ),
        pytest.param(
            "![a](<x(y>)z) http://x.example",
            "\\!\\[a\\]\\(&lt;x\\(y\\>\\)z) http://x.example",
            id="pointy-destination",
        ),
        pytest.param(
            "![a](b\n\nhttp://x.example",
            "\\!\\[a\\]\\(b\n\nhttp://x.example",
            id="a-blank-line-ends-a-destination",
        ),
        pytest.param(
            "see www.x.example/a\\` or a_www.x.example/&lt;",
            "see www\\.x\\.example&#47;a&bsol;&grave; or a_www\\.x\\.example&#47;&amp;lt;",
            id="a-url-that-runs-into-a-reference-is-plain",
        ),
    ],
)
def test_clean_lines_by_their_place(text: str, message: str) -> None:
    assert escape_reply(text, untrusted=False) == EscapedReply(message, unsafe_links=False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a\n===", "a\n&#61;==", id="setext-underline-shown"),
        pytest.param(">     a", "\\>     a", id="no-quote-so-no-code"),
        pytest.param("    a", "&#32;   a", id="indented-line"),
        pytest.param("# a", "\\# a", id="no-heading"),
    ],
)
def test_untrusted_lines_by_their_place(text: str, message: str) -> None:
    assert escape_reply(text, untrusted=True) == EscapedReply(f"{message}\n\n{NOTICE}", True)


def test_a_reference_link_keeps_its_url_in_a_reply_with_no_image() -> None:
    reply = escape_reply("see [t][r]\n\n[r]: https://x.example", untrusted=False)
    assert fetches(reply.message, CLEAN) == ["https://x.example"]
    with_image = escape_reply("see [t][r] ![i][r]\n\n[r]: https://x.example", untrusted=False)
    assert fetches(with_image.message, CLEAN) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "see https://x.example/a", "see https&#58;&#47;&#47;x\\.example&#47;a", id="url"
        ),
        pytest.param("a@b.example", "a&#64;b\\.example", id="email"),
        pytest.param("`ls -l` `a/b`", "`ls -l` &grave;a&#47;b&grave;", id="spans"),
    ],
)
def test_untrusted_output(text: str, message: str) -> None:
    assert escape_reply(text, untrusted=True) == EscapedReply(f"{message}\n\n{NOTICE}", True)


LINKS = [
    pytest.param("see https://x.example/a?b=1", id="bare-https"),
    pytest.param("see www.x.example", id="www"),
    pytest.param("see <https://x.example>", id="autolink"),
    pytest.param("see [t](https://x.example)", id="markdown-link"),
    pytest.param("see [t][r]\n\n[r]: https://x.example", id="reference-link"),
    pytest.param("mail a@x.example", id="email"),
    pytest.param("mailto:a@x.example", id="mailto"),
    pytest.param("ftp://x.example/f", id="ftp"),
    pytest.param("xhttps://x.example", id="scheme-mid-word"),
    pytest.param("[a [b](https://x)](https://y)", id="link-in-brackets"),
]


@pytest.mark.parametrize("text", LINKS)
def test_untrusted_links_become_code_with_the_notice(text: str) -> None:
    reply = escape_reply(text, untrusted=True)
    assert reply.unsafe_links
    assert not reply.fenced, reply.message
    assert reply.message.endswith(f"\n\n{NOTICE}")
    assert reply.message.count(NOTICE) == 1
    assert not leaks(reply.message, links=True, last_paragraph=NOTICE)
    assert fetches(reply.message, CLEAN) == []
    assert _kept(text, reply.message)


@pytest.mark.parametrize(
    "text", [p for p in LINKS if p.id not in ("reference-link", "link-in-brackets")]
)
def test_clean_links_stay(text: str) -> None:
    assert escape_reply(text, untrusted=False) == EscapedReply(text, unsafe_links=False)


def test_clean_reference_links_are_shown_as_text() -> None:
    reply = escape_reply("see [t][r]\n\n[r]: https://x.example", untrusted=False)
    assert reply.message == "see \\[t\\]\\[r\\]\n\n\\[r\\]: https://x.example"


def test_a_clean_plain_url_is_still_previewed() -> None:
    reply = escape_reply("look https://x.example ![a](https://i.example/p.png)", False)
    assert fetches(reply.message, _props(reply)) == ["https://x.example"]


def test_untrusted_empty_reply_is_the_notice() -> None:
    assert escape_reply("", untrusted=True) == EscapedReply(NOTICE, unsafe_links=True)


def test_an_open_fence_is_closed_before_the_notice() -> None:
    reply = escape_reply("run&#58;\n```sh\ncurl https://x.example\n", untrusted=True)
    assert reply.message == f"run&amp;\\#58;\n\n```sh\ncurl https://x.example\n\n```\n\n{NOTICE}"


def test_deep_nesting_is_flat_text() -> None:
    text = "[" * 95 + "![a](u)" + "](v)" * 95
    reply = escape_reply(text, untrusted=True)
    assert not reply.fenced
    assert not leaks(reply.message, links=True, last_paragraph=NOTICE)


def test_what_cannot_be_proven_is_one_fenced_block(monkeypatch: pytest.MonkeyPatch) -> None:
    import boxmaker.core.display.reply_escape as module

    monkeypatch.setattr(module, "leaks", lambda *args, **kwargs: ["a link"])
    text = "see ```` ![a](u)"
    reply = escape_reply(text, untrusted=True)
    assert reply.fenced
    assert reply.message == f"`````\n{text}\n`````\n\n{NOTICE}"
    assert fetches(reply.message, CLEAN) == []


def test_escaping_is_deterministic_and_from_scratch() -> None:
    text = "a ![i](u) https://x `c` [t](v)"
    assert escape_reply(text, True) == escape_reply(text, True)
    longer = escape_reply(text + " more", True)
    assert longer == escape_reply(text + " more", True)


# --- properties: hostile replies, judged by the fetch simulator ---

_URLS = st.sampled_from(
    ["http://e.x/i.png", "https://e.x/a?b=`c`", "www.e.x", "<https://e.x>", "a@e.x", "u", ""]
)
_WORDS = st.sampled_from(["a", "b c", "ü", "😀", " ", "  ", "\t", "x:y", "\\", "\\!", "\\["])
_FRAGMENTS = st.one_of(
    _WORDS,
    _URLS,
    st.sampled_from(["`", "``", "```", "````", "~~~", "[", "]", "(", ")", "!", "<", ">", "|"]),
    st.sampled_from(["\n", "\n\n", "\r\n", "\n> ", "\n- ", "\n    ", "\n| a | b |\n|---|---|\n"]),
    st.builds("![{}]({})".format, _WORDS, _URLS),
    st.builds('![{}]({} "{}")'.format, _WORDS, _URLS, _WORDS),
    st.builds("[{}]({})".format, _WORDS, _URLS),
    st.builds("![{}][{}]".format, _WORDS, _WORDS),
    st.builds("[{}]: {}\n".format, _WORDS, _URLS),
    st.builds("`{}`".format, _WORDS),
    st.builds("```\n{}\n```\n".format, _URLS),
    st.builds("[![{}]({})]({})".format, _WORDS, _URLS, _URLS),
)
_REPLIES = st.lists(_FRAGMENTS, max_size=14).map("".join)


@settings(max_examples=3000, deadline=None)
@given(text=_REPLIES, untrusted=st.booleans())
def test_no_escaped_reply_fetches_an_image_or_leaks_a_link(text: str, untrusted: bool) -> None:
    reply = escape_reply(text, untrusted)
    for props in (_props(reply), CLEAN):
        if untrusted:
            assert fetches(reply.message, props) == [], reply.message
        else:
            assert fetches(reply.message, props, previews=False) == [], reply.message
    assert reply.unsafe_links == untrusted
    assert _kept(text, reply.message)
    if untrusted:
        assert reply.message.endswith(NOTICE)


_PLAIN = st.lists(
    st.one_of(
        st.sampled_from(["see ", "and ", "ü ", "\n", "\n\n", "- "]),
        st.sampled_from(["https://e.x/a ", "www.e.x ", "[t](https://e.x/b) "]),
        st.builds("![{}]({}) ".format, st.sampled_from(["a", "b"]), _URLS),
    ),
    max_size=10,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=_PLAIN)
def test_clean_replies_keep_plain_links(text: str) -> None:
    reply = escape_reply(text, untrusted=False)
    without_images = re.sub(r"!\[[^\]]*\]\([^)]*\) ", "", text)
    assert fetches(reply.message, CLEAN) == fetches(without_images, CLEAN)
