"""Which URLs Mattermost 11 (server and clients) would fetch by itself for a post. No I/O.

003 section 9's table, measured on the owner's server, and Mattermost's code
(`getFirstLinkAndImages` and `getEmbedsAndImages` in the server's post metadata,
`MarkdownImage` in the web app, `renderImage` in the mobile app):

- every Markdown image (inline or reference style) outside code is fetched, by
  the server at posting time and by every client (no image proxy);
- the first plain URL (a bare `http(s)://` or `www.` URL autolinked by the
  renderer, or an `<http(s)://...>` autolink) is fetched by the server for a
  preview when previews are on; a Markdown link `[t](u)` is never previewed.
  Conservative: an earlier autolink of another kind (an email) is skipped,
  where the server would pick it and fetch nothing;
- with the prop `unsafe_links` = "true" nothing is fetched: the server drops the
  images and the preview (a permalink to the same server aside, which reads its
  own database), the web app shows an image's alt text, the mobile app nothing;
- nothing in a code span, a fenced or indented code block is fetched; raw HTML
  (`<img>`) is shown as text, so it fetches nothing.

Built on its own parse (markdown-it-py, CommonMark with GFM tables, HTML off),
independent of `boxmaker.core.display.reply_escape`, so that it can catch its mistakes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from markdown_it import MarkdownIt

# text_join off: a backslash escape or a character reference stays a token of its own,
# as the server's parser (server/public/shared/markdown/inlines.go) matches autolinks
# in the raw source: at a literal `:` followed by `//`, or at a literal `www.`
_MD = (
    MarkdownIt("commonmark", {"html": False, "maxNesting": 100})
    .enable(["table", "strikethrough"])
    .disable("text_join")
)
# the server's autolinks (autolink.go): an allowed scheme and `://`, or `www` with up to
# three digits and `.`, then anything to a space or `<`
_BARE = re.compile(r"(?:(?:https?|ftp|gemini)://|www\d{0,3}\.)[^\s<]*", re.IGNORECASE)
_TRAILING = ".,:;!?*_~'\")>"


def _trimmed(url: str) -> str:
    while url and url[-1] in _TRAILING:
        if url[-1] == ")" and url.count("(") >= url.count(")"):
            break
        url = url[:-1]
    return url


def _preview_url(url: str) -> str | None:
    lowered = url.lower()
    if re.match(r"www\d{0,3}\.", lowered):
        return f"http://{url}"
    return url if lowered.startswith(("http://", "https://")) else None


def fetches(message: str, props: Mapping[str, object], *, previews: bool = True) -> list[str]:
    """The URLs fetched automatically for a post of `message` with `props` (module docstring)."""
    if props.get("unsafe_links") == "true":
        return []
    env: dict[str, Any] = {}
    images: list[str] = []
    first: str | None = None
    for token in _MD.parse(message, env):
        in_link = 0
        for child in token.children or []:
            if child.type == "image":
                images.append(str(child.attrGet("src") or ""))
            elif child.type == "link_open":
                in_link += 1
                if child.markup == "autolink" and first is None:
                    first = _preview_url(str(child.attrGet("href") or ""))
            elif child.type == "link_close":
                in_link -= 1
            elif child.type == "text" and not in_link and first is None:
                for match in _BARE.finditer(child.content):
                    first = _preview_url(_trimmed(match.group()))
                    if first is not None:
                        break
    preview = [first] if previews and first is not None else []
    return [url for url in images if url] + preview
