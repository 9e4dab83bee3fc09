"""Escaped replies judged by the renderers Mattermost runs (issue 28, build 0).

The web app's marked fork with its URL autolinker and the mobile app's
@mattermost/commonmark (tests/support/renderers.py, tests/renderers/render.js),
on hostile replies: no image in any reply; no link or autolink in an untrusted one,
nor a URL the server would fetch (the fetch simulator); no render over a second;
every character of the reply visible, in order. Then (issue 38) random Markdown and
the shapes that showed escapes or made headings, each judged against the reply's own
unescaped rendering (`_judge`): no character reference shown as written, no heading
that was not one, and in a clean reply no link and no preview to an image's URL.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.renderers import Rendered, Renderers

from boxmaker.core.display.reply_escape import NOTICE, escape_reply
from boxmaker.testing.fetch_simulator import fetches

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


# --- hypothesis: random Markdown, each reply judged against its own unescaped rendering ---
#
# Built line by line from the constructs a renderer reads by the lines around them: setext
# underlines, indented and fenced code, quotes and list items with indentation after their
# markers, reference definitions (the destination on its line or the next), HTML blocks,
# entities, backslashes and backticks. Image URLs come from their own pool, used only as
# images' destinations and definitions', so a link to one is a link to an image's URL.

_IMAGE_URLS = ["http://e.x/i.png", "https://e.x/j.gif", "www.e.x/k.png", "e.x/l.png"]
_IMAGE_URL = st.sampled_from(_IMAGE_URLS)
_LINK_URL = st.sampled_from(["https://e.x/a", "www.e.x/b", "a@e.x", "http://e.x/c(d)"])
_LABEL = st.sampled_from(["r", "R", "x y", "r\\]"])
_INLINE = st.one_of(
    st.sampled_from(
        ["a", "b c", "ü 😀", "x:y", "&#92;", "&amp;", "&#96;", "&lt;", "&#61;", "\\", "\\*"]
    ),
    st.sampled_from(["\\`", "`", "``", "*a*", "_a_", "~~a~~", "$x$", "|", "(", ")", "[", "]"]),
    st.sampled_from(["!", "<", ">", "#", "=", "-", "<div>", "<!--", "-->", "<b>", "</div>"]),
    st.builds("![{}]({})".format, _LABEL, _IMAGE_URL),
    st.builds("![{}]( {} )".format, _LABEL, _IMAGE_URL),
    st.builds("![{}](<{}>)".format, _LABEL, _IMAGE_URL),
    st.builds('![{}]({} "t(")'.format, _LABEL, _IMAGE_URL),
    st.builds("![{}](".format, _LABEL),  # a destination that never comes
    st.builds("![{}][{}]".format, _LABEL, _LABEL),
    st.builds("![{}][]".format, _LABEL),
    st.builds("![{}]".format, _LABEL),
    st.builds("[{}]({})".format, _LABEL, _LINK_URL),
    st.builds("<{}>".format, _LINK_URL),
    _LINK_URL,
    st.builds("`{}`".format, _LABEL),
)
_CONTENT = st.one_of(
    st.lists(_INLINE, min_size=1, max_size=4).map(" ".join),
    st.lists(_INLINE, min_size=1, max_size=4).map("".join),
    st.sampled_from(["===", "---", "=", "-", "=-=", "***", "", "   "]),
    st.sampled_from(["```", "```py", "```py x", "~~~", "~~~ `", "````", "```~"]),
    st.builds("# {}".format, _INLINE),
    st.builds("## {} ##".format, _INLINE),
    st.builds("[{}]: {}".format, _LABEL, _IMAGE_URL),
    st.builds("[{}]: <{}> 't'".format, _LABEL, _IMAGE_URL),
    st.builds("[{}]:\n{}".format, _LABEL, _IMAGE_URL),  # the destination on the next line
    st.builds("[{}]:\n  {} 't'".format, _LABEL, _IMAGE_URL),
    st.builds("![{}](\n{})".format, _LABEL, _IMAGE_URL),
    st.builds("![{}](\n<{}>\n't')".format, _LABEL, _IMAGE_URL),
    st.sampled_from(["| a | b |", "|---|---|", "<div>", "<!-- x", "<img src=x>"]),
)
_PREFIX = st.sampled_from(
    ["", "", "", "> ", ">     ", ">", "- ", "-     ", "* ", "1. ", "  ", "    ", "     "]
).map(str) | st.sampled_from(["\t", "> - ", "- > ", ">\t\t", "> >      "])
_LINE = st.builds("{}{}".format, _PREFIX, _CONTENT)
_MARKDOWN = st.lists(_LINE, min_size=1, max_size=8).map("\n".join)
# a character reference shown as written, not as its character (`&#96` cut from its `;`)
_ARTIFACT = re.compile(r"&(?:#[0-9]+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);?")


def _to(link: str, url: str) -> bool:
    """Whether `link` leads to `url` (or to more of its path): scheme and case aside."""

    def bare(address: str) -> str:
        return re.sub(r"^[A-Za-z][A-Za-z0-9+.\-]*:/*", "", unquote(address)).lower()

    return bare(link).startswith(bare(url))


def _subsequence(short: str, long: str) -> bool:
    rest = iter(long)
    return all(char in rest for char in short)


def _headings_were_headings(raw: tuple[str, ...], escaped: tuple[str, ...]) -> bool:
    """Each escaped heading is one of the unescaped rendering's, each used once, in order:
    one whose letters and digits it shows, with what escaping shows as written around
    them (an image's source, a reference of the reply's), or one that shows its letters
    and digits with more around them (marked's fork underlines a quote's line whole,
    `> # a`, where the escaped quote holds the heading `a`)."""
    rest = iter(re.sub(r"\W", "", heading) for heading in raw)

    def same(text: str, heading: str) -> bool:
        shown = re.sub(r"\W", "", html.unescape(heading))
        return _subsequence(text, shown) or _subsequence(shown, text)

    return all(any(same(text, heading) for text in rest) for heading in escaped)


def _judge(
    renderers: Renderers, text: str, untrusted: bool, images: set[str] | None = None
) -> None:
    """`_check`, then the escaped reply against the reply's own unescaped rendering: no
    character reference shown as written; no heading but one the unescaped reply had (none
    when untrusted); no link and no preview to an image's URL (`images`, by default every
    image the unescaped reply shows in a renderer or the server fetches)."""
    _check(renderers, text, untrusted)
    reply = escape_reply(text, untrusted)
    raw = renderers.render(text, failures=True)  # a renderer that throws reads no heading
    shown_images = {url for found in raw.values() for url in found.images}
    shown_images |= set(fetches(text, {"unsafe_links": "false"}, previews=False))
    image_urls = shown_images if images is None else shown_images & images
    for name, found in renderers.render(reply.message).items():
        # the text shows each link's target after it: less those
        shown = len(_ARTIFACT.findall(found.text))
        shown -= sum(len(_ARTIFACT.findall(link)) for link in found.links)
        assert shown <= len(_ARTIFACT.findall(text)), (name, text, reply.message, found.text)
        if untrusted:
            assert found.headings == (), (name, text, reply.message, found.headings)
        assert _headings_were_headings(raw[name].headings, found.headings), (
            name,
            text,
            reply.message,
            raw[name].headings,
            found.headings,
        )
        assert not [url for url in image_urls if any(_to(link, url) for link in found.links)], (
            name,
            text,
            reply.message,
            found.links,
        )
    previewed = fetches(reply.message, {"unsafe_links": "false"}, previews=True)
    assert not [url for url in previewed if any(_to(url, image) for image in image_urls)], (
        text,
        reply.message,
        previewed,
    )


@settings(
    max_examples=int(os.environ.get("MARKDOWN_EXAMPLES", "2000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(text=_MARKDOWN, untrusted=st.booleans())
def test_random_markdown_shows_every_character_and_makes_nothing_new(
    renderers: Renderers, text: str, untrusted: bool
) -> None:
    """Every character of the reply shown, in order, and no escape shown as written;
    nothing an image; nothing a link when untrusted, and when clean no link and no
    preview to an image's URL; nothing a heading that was not one unescaped."""
    _judge(renderers, text, untrusted, images=set(_IMAGE_URLS))


# --- the shapes of issue 38, each judged the same way ---

LINE_SHAPES = [
    pytest.param("a\n===", id="setext-underline"),
    pytest.param("a\n=-=", id="mixed-underline-marked-reads"),
    pytest.param("> a\n> ---", id="underline-in-a-quote"),
    pytest.param(">     a &#92; \\ ` b", id="quoted-line-indented-five"),
    pytest.param("> x\n>\n>      a \\ ` b", id="indented-code-in-a-quote"),
    pytest.param("-     a \\ ` b", id="indented-code-after-a-list-marker"),
    pytest.param("> - x\n>\n>       a \\ ` b", id="indented-code-in-a-list-in-a-quote"),
    pytest.param(">\t\ta \\ ` b", id="tabs-after-a-quote-marker"),
    pytest.param("<!--\n\n# x\n-->", id="heading-in-an-html-comment"),
    pytest.param("<div>\n\n# x\n\n</div>", id="heading-in-an-html-block-marked-closes"),
    pytest.param("> ```\n> # x\n> ```", id="heading-in-a-quoted-fence"),
    pytest.param("~~~ `\n~~~\n# a\n~~~", id="heading-after-a-fence-marked-does-not-open"),
    pytest.param("```\n```~\n```\n# a\n```", id="heading-after-a-fence-marked-ends-early"),
    pytest.param("www.e.x/b\\` and https://e.x/a<b", id="references-a-url-runs-into"),
    pytest.param("a_www.e.x/b&amp; x", id="a-url-after-an-underscore"),
]

IMAGE_URL_SHAPES = [
    pytest.param("![x][r]\n\n[r]: http://e.x/i.png", id="full-reference"),
    pytest.param("[r]: http://e.x/i.png\n\n![R]", id="definition-first"),
    pytest.param("![x][r]\n\n[r]:\n  http://e.x/i.png 't'", id="destination-on-the-next-line"),
    pytest.param("![r][]\n\n> [r]: <http://e.x/i.png> 't'", id="quoted-definition"),
    pytest.param("![x](\nhttp://e.x/i.png)", id="inline-destination-on-the-next-line"),
    pytest.param("![x]( http://e.x/i.png )", id="spaces-around-the-destination"),
    pytest.param("![x](<http://e.x/i(.png>)", id="pointy-destination-with-a-parenthesis"),
    pytest.param("www.e.x/a![x](http://e.x/i.png)", id="after-a-url"),
]


@pytest.mark.parametrize("text", LINE_SHAPES)
@pytest.mark.parametrize("untrusted", [False, True], ids=["clean", "untrusted"])
def test_every_character_is_shown_and_no_heading_is_made(
    renderers: Renderers, text: str, untrusted: bool
) -> None:
    _judge(renderers, text, untrusted)


@pytest.mark.parametrize("text", IMAGE_URL_SHAPES)
def test_no_image_url_of_a_clean_reply_is_a_link_or_a_preview(
    renderers: Renderers, text: str
) -> None:
    raw = renderers.render(text, failures=True)
    fetched = fetches(text, {"unsafe_links": "false"}, previews=False)
    assert fetched or any(found.images for found in raw.values()), "the case must show an image"
    _judge(renderers, text, untrusted=False)


def test_a_clean_reply_keeps_its_headings_until_something_could_hide_one(
    renderers: Renderers,
) -> None:
    text = "# Plan\n\n```sh\nmake\n```\n\n## Then\n\n<div>\n\n## Later"
    for found in renderers.render(escape_reply(text, untrusted=False).message).values():
        assert found.headings == ("Plan", "Then"), found
