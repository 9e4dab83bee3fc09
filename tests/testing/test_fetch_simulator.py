"""The fetch simulator against 003 section 9's table, measured on the owner's server."""

from __future__ import annotations

import pytest

from boxmaker.testing.fetch_simulator import fetches


@pytest.mark.parametrize(
    ("message", "fetched"),
    [
        pytest.param("a plain https://x.example/a", ["https://x.example/a"], id="plain-url"),
        pytest.param("`https://x.example`", [], id="url-in-code-span"),
        pytest.param("```\nhttps://x.example\n```", [], id="url-in-fenced-block"),
        pytest.param("    https://x.example", [], id="url-in-indented-block"),
        pytest.param("[text](https://x.example)", [], id="markdown-link-not-previewed"),
        pytest.param("![a](https://i.example/p.png)", ["https://i.example/p.png"], id="image"),
        pytest.param("`![a](https://i.example/p.png)`", [], id="image-in-code-span"),
        pytest.param("hxxps://x.example", [], id="defanged"),
        pytest.param("www.x.example", ["http://www.x.example"], id="www"),
        pytest.param("<https://x.example>", ["https://x.example"], id="autolink"),
        pytest.param(
            "https://a.example, https://b.example", ["https://a.example"], id="first-only"
        ),
        pytest.param("(https://x.example/a).", ["https://x.example/a"], id="trailing-punctuation"),
        pytest.param(
            "![r]\n\n[r]: https://i.example/p.png",
            ["https://i.example/p.png"],
            id="reference-image",
        ),
        pytest.param(
            "![a](https://i.example/1) ![b](https://i.example/2) https://x.example",
            ["https://i.example/1", "https://i.example/2", "https://x.example"],
            id="images-then-preview",
        ),
        pytest.param(
            '<img src="https://i.example/p.png">',
            ["https://i.example/p.png"],
            id="html-text-autolinked",
        ),
        pytest.param("mail a@x.example", [], id="email-not-fetched"),
        pytest.param("", [], id="empty"),
    ],
)
def test_fetches(message: str, fetched: list[str]) -> None:
    assert fetches(message, {}) == fetched


def test_unsafe_links_fetches_nothing() -> None:
    message = "![a](https://i.example/p.png) https://x.example"
    assert fetches(message, {"unsafe_links": "true"}) == []
    assert fetches(message, {"unsafe_links": "false"}) == [
        "https://i.example/p.png",
        "https://x.example",
    ]


def test_previews_off_still_fetches_images() -> None:
    message = "![a](https://i.example/p.png) https://x.example"
    assert fetches(message, {}, previews=False) == ["https://i.example/p.png"]


# The server's own autolink test cases (server/public/shared/markdown/autolink_test.go,
# TestParseURLAutolink and TestParseWWWAutolink), those whose link is the message's
# first: the simulator previews what the server links. Where the server links nothing
# the simulator may still find a URL (it errs on the side of a fetch), except for these.
SERVER_CASES = [
    ("http://example.com and some text", "http://example.com"),
    ("https://example.com/abcd and some text", "https://example.com/abcd"),
    ("This is https://example.com and some text", "https://example.com"),
    (
        "These are https://www.example.com/abcd?foo=bar and some text",
        "https://www.example.com/abcd?foo=bar",
    ),
    ("(https://www.example.com/foo/bar)", "https://www.example.com/foo/bar"),
    ("_http://www.example.com_", "http://www.example.com"),
    ("Those were ~~https://example.com~~", "https://example.com"),
    ("<b>We use http://example.com</b>", "http://example.com"),
    ("www.example.com/abcd?foo=bar and some text", "http://www.example.com/abcd?foo=bar"),
    ("This is www.example.com??", "http://www.example.com"),
    ("Our backup site is at www1.example.com/foo", "http://www1.example.com/foo"),
    ("<b>We use www2.example.com</b>", "http://www2.example.com"),
    ("This is an :emoji:", None),
    ("These are two things: apple and orange", None),
    ("This is some text", None),
]


@pytest.mark.parametrize(("message", "linked"), SERVER_CASES)
def test_the_server_autolink_cases(message: str, linked: str | None) -> None:
    assert fetches(message, {}) == ([linked] if linked else [])


@pytest.mark.parametrize(
    "message",
    ["https&#58;//example.com", "https\\://example.com", "www\\.example.com", "www&#46;e.com"],
)
def test_an_escape_inside_a_url_breaks_it_as_on_the_server(message: str) -> None:
    # the server matches a literal `://` or `www.` in the source (inlines.go, autolink.go)
    assert fetches(message, {}) == []
