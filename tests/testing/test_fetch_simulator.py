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
