"""Escaped replies judged by the renderers Mattermost runs (issue 28, build 0).

The web app's marked fork with its URL autolinker and the mobile app's
@mattermost/commonmark (boxmaker/testing/renderers.py, tests/renderers/render.js),
on hostile replies: no image in any reply; no link or autolink in an untrusted one,
nor a URL the server would fetch (the fetch simulator); no render over a second;
every character of the reply visible, in order.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker.core.reply_escape import NOTICE, escape_reply
from boxmaker.testing.fetch_simulator import fetches
from boxmaker.testing.renderers import Rendered, Renderers

RENDER_LIMIT_MS = 1000.0
_FENCE_LINE = re.compile(r"^ {0,3}(?:`{3,}|~{3,}).*$", re.MULTILINE)
# what a reply may render as markup rather than show: a kept code span's backticks, and in a
# clean reply its formatting (its links' targets are shown)
_MARKUP = {"`"}
_CLEAN_MARKUP = _MARKUP | set("*_#>-+|=[]()!<")


@pytest.fixture(scope="module")
def renderers() -> Iterator[Renderers]:
    with Renderers() as running:
        yield running


def _characters(text: str, dropped: set[str]) -> str:
    return "".join(char for char in text if not char.isspace() and char not in dropped)


def _in_order(original: str, shown: str, dropped: set[str]) -> bool:
    """Every character of `original` (less `dropped`) is in `shown`, in order. In a clean
    reply a renderer may take escaped text into an autolink, which shows it as written
    (`&#58;`, `\\!`): so references are read as their characters on both sides, and
    backslashes skipped."""
    rest = iter(_characters(html.unescape(shown), dropped | {"\\"}))
    return all(char in rest for char in _characters(html.unescape(original), dropped | {"\\"}))


def _check(renderers: Renderers, text: str, untrusted: bool) -> None:
    reply = escape_reply(text, untrusted)
    assert reply.unsafe_links == untrusted
    rendered = renderers.render(reply.message)
    for name, found in rendered.items():
        assert found.images == (), (name, text, reply.message, found)
        if untrusted:
            assert found.links == (), (name, text, reply.message, found)
        assert found.ms < RENDER_LIMIT_MS, (name, found.ms, reply.message[:200])
        dropped = _MARKUP if untrusted else _CLEAN_MARKUP
        visible = _FENCE_LINE.sub("", text)
        assert _in_order(visible, found.text, dropped), (name, text, reply.message, found.text)
    props = {"unsafe_links": "true" if reply.unsafe_links else "false"}
    for judged in (props, {"unsafe_links": "false"}):
        assert fetches(reply.message, judged, previews=untrusted) == [], reply.message
    if untrusted:
        assert reply.message.endswith(NOTICE)


def _seen(rendered: dict[str, Rendered]) -> tuple[int, int]:
    return (
        sum(len(found.images) for found in rendered.values()),
        sum(len(found.links) for found in rendered.values()),
    )


# --- the shapes that got through the escaping before (issue 28) ---

SHAPES = [
    pytest.param("![x](http://e.x/i.png =100x200)", id="size-suffix"),
    pytest.param("![x](http://e.x/a b.png)", id="destination-with-a-space"),
    pytest.param('![x](http://e.x/i.png "t)', id="stray-title"),
    pytest.param("![x](<http://e.x/i.png)", id="unclosed-angle"),
    pytest.param("```\n![x](http://e.x/i.png)", id="unclosed-fence"),
    pytest.param("~~~ `\n![x](http://e.x/i.png)\n~~~", id="fence-info-with-backtick"),
    pytest.param("``` `\n![x](http://e.x/i.png)\n```", id="not-a-fence"),
    pytest.param("```\na\n````x\n![x](http://e.x/i.png)\n```", id="closer-with-info"),
    pytest.param("![x][r]\n[r]:\nhttp://e.x/i.png", id="definition-on-the-next-line"),
    pytest.param("![x] [r]\n\n[r]: http://e.x/i.png", id="space-before-the-label"),
    pytest.param("`a\n- ![x](http://e.x/i.png)`", id="span-ended-by-a-list"),
    pytest.param("| a |\n`b\n|---|\n![x](http://e.x/i.png)`", id="span-ended-by-a-table"),
    pytest.param('<a title="`">![x](http://e.x/i.png)`', id="tag-swallows-a-backtick"),
    pytest.param("<div>\n![x](http://e.x/i.png)\n</div>", id="html-block"),
    pytest.param("<img src=http://e.x/i.png>", id="img-tag"),
    pytest.param("http://e.x/a`![x](http://e.x/i.png)`", id="url-eats-the-backtick"),
    pytest.param("**a `b** ![x](http://e.x/i.png) c`", id="emphasis-into-a-span"),
    pytest.param("~~a `b~~ ![x](http://e.x/i.png) c`", id="strikethrough-into-a-span"),
    pytest.param("    ![x](http://e.x/i.png)\n\n- a\n\n      ![x](http://e.x/i.png)", id="indent"),
    pytest.param("[![x](http://e.x/i.png)](http://e.x/)", id="image-in-a-link"),
    pytest.param(
        "&lbrack;x&rbrack;&#40;http://e.x/i.png&#41; !&#91;x](http://e.x/i.png)", id="ent"
    ),
    pytest.param("\\![x](http://e.x/i.png) \\\\![x](http://e.x/i.png)", id="backslashes"),
]

LINK_SHAPES = [
    pytest.param("see www1.e.x and www.e.x", id="www1"),
    pytest.param("mail ünï@e.co or a@e.x", id="non-ascii-email"),
    pytest.param("e.co/path and\ne.x/a", id="bare-host-path"),
    pytest.param("x:y mailto:a@e.x tel:123 custom:thing", id="schemes"),
    pytest.param("<https://e.x> <a@e.x> [t](https://e.x) [t][r]\n\n[r]: https://e.x", id="links"),
    pytest.param("https\\://e.x https://e.x", id="escaped-scheme"),
    pytest.param("`http://e.x` `www.e.x` `a@e.x` `e.x/p`", id="in-code-spans"),
]


@pytest.mark.parametrize("text", SHAPES)
@pytest.mark.parametrize("untrusted", [False, True], ids=["clean", "untrusted"])
def test_no_shape_shows_an_image(renderers: Renderers, text: str, untrusted: bool) -> None:
    unescaped = renderers.render(text)
    assert _seen(unescaped) != (0, 0) or "e.x" in text, "the case links or shows an image raw"
    _check(renderers, text, untrusted)


@pytest.mark.parametrize("text", LINK_SHAPES)
def test_no_untrusted_shape_links(renderers: Renderers, text: str) -> None:
    if not text.startswith("`"):
        assert _seen(renderers.render(text))[1], "the case must link unescaped"
    _check(renderers, text, untrusted=True)


def test_a_clean_reply_keeps_its_links(renderers: Renderers) -> None:
    text = "see https://e.x/a?b=1&c=2 and [docs](https://e.x/d) or <https://e.x/f>, www.e.x"
    rendered = renderers.render(escape_reply(text, untrusted=False).message)
    for found in rendered.values():
        assert {"https://e.x/a?b=1&c=2", "https://e.x/d", "https://e.x/f"} <= set(found.links)


def test_a_clean_reply_keeps_code_and_formatting(renderers: Renderers) -> None:
    text = "# Plan\n\n- run `make test`\n- **then** push\n\n```sh\nmake ![x](u)\n```\n"
    message = escape_reply(text, untrusted=False).message
    assert "`make test`" in message
    assert "```sh\nmake ![x](u)\n```" in message
    web = renderers.render(message)["web"]
    assert "make ![x](u)" in web.text


def test_backtracking_pieces_render_fast(renderers: Renderers) -> None:
    text = "[``x]" * 3000 + "![a](http://e.x/i.png)"
    for untrusted in (False, True):
        _check(renderers, text, untrusted)


# --- hypothesis: hostile replies built from the shapes above ---

_URL = st.sampled_from(
    [
        "http://e.x/i.png",
        "https://e.x/a?b=`c`",
        "<http://e.x/i.png",
        "http://e.x/a b.png",
        "http://e.x/i.png =10x20",
        'http://e.x/i.png "t',
        "www1.e.x",
        "e.x/p",
        "ü@e.x",
        "a@e.x",
        "u",
        "",
    ]
)
_WORD = st.sampled_from(
    ["a", "b c", "ü", "😀", " ", "\t", "x:y", "\\", "\\!", "\\[", "&amp;", "&#91;", "$x$", "_a_"]
)
_FRAGMENT = st.one_of(
    _WORD,
    _URL,
    st.sampled_from(
        ["`", "``", "```", "~~~", "[", "]", "(", ")", "!", "<", ">", "|", "*", "**", "~~", "#"]
    ),
    st.sampled_from(
        ["\n", "\n\n", "\r\n", "\n> ", "\n- ", "\n1. ", "\n    ", "\n| a | b |\n|---|---|\n"]
    ),
    st.sampled_from(["<div>", "<img src=", '<a title="`">', "</a>", "<!--", "-->"]),
    st.builds("![{}]({})".format, _WORD, _URL),
    st.builds("![{}] [{}]".format, _WORD, _WORD),
    st.builds("[{}]({})".format, _WORD, _URL),
    st.builds("![{}][{}]".format, _WORD, _WORD),
    st.builds("[{}]:\n{}\n".format, _WORD, _URL),
    st.builds("[{}]: {}\n".format, _WORD, _URL),
    st.builds("`{}`".format, _WORD),
    st.builds("```{}\n{}\n".format, st.sampled_from(["", "sh", " `", "x y"]), _URL),
    st.builds("[![{}]({})]({})".format, _WORD, _URL, _URL),
    st.builds("{} ``{}`` {}".format, _URL, _WORD, _URL),
)
_REPLIES = st.lists(_FRAGMENT, max_size=16).map("".join)


@settings(
    max_examples=int(os.environ.get("RENDER_EXAMPLES", "3000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(text=_REPLIES, untrusted=st.booleans())
def test_hostile_replies_in_mattermosts_renderers(
    renderers: Renderers, text: str, untrusted: bool
) -> None:
    _check(renderers, text, untrusted)
