"""The proof behind reply escaping: what a CommonMark parser still sees in a post. No I/O.

The parser is markdown-it-py's CommonMark with GFM tables and strikethrough
(Mattermost renders both) and raw HTML off (Mattermost shows a tag as text), with
a nesting limit of 100; a text nested deeper than `DEPTH_GUARD` is never proven.

`leaks(message, links=..., last_paragraph=...)` parses the message and describes,
one per entry, every image, and with `links` every link, every reference
definition and every bare URL in text outside code (what Mattermost autolinks:
`scheme://`, `www.`, an email address, the schemes in `_SCHEMES`); with
`last_paragraph`, also whether the message does not end with exactly that
paragraph at the top level. An empty list proves the message.

A bare URL is looked for in each run of plain text: a backslash escape or a
character reference ends the run (markdown-it's `text_join` is off, so each stays a
token of its own), because Mattermost's renderers match autolinks in the source,
where the escape stands between the characters (`https&#58;//` links nowhere).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

NESTING_LIMIT = 100
DEPTH_GUARD = 90

# Schemes without `//` that a client may autolink (Mattermost's defaults and common custom ones)
_SCHEMES = "mailto|tel|sms|callto|xmpp|sip|sips|data|javascript|vbscript|file|magnet|news|irc"
_NOT_AFTER_SCHEME = r"[^\s:<>`|\\]"
EMAIL = r"[A-Za-z0-9._+\-]+@[A-Za-z0-9_\-]+\.[A-Za-z0-9]"
PROOF_URL = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://|www\d{{0,3}}\.|(?:{_SCHEMES}):(?={_NOT_AFTER_SCHEME})|{EMAIL}",
    re.IGNORECASE,
)


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "maxNesting": NESTING_LIMIT})
    return md.enable(["table", "strikethrough"]).disable("text_join")


_PROOF = _parser()


def _text_runs(children: Sequence[Token]) -> Iterator[str]:
    run: list[str] = []
    for child in children:
        if child.type == "text":
            run.append(child.content)
            continue
        if run:
            yield "".join(run)
            run = []
    if run:
        yield "".join(run)


def leaks(message: str, *, links: bool, last_paragraph: str | None = None) -> list[str]:
    """What in `message` could still fetch or link; an empty list proves it (module docstring)."""
    env: dict[str, Any] = {}
    tokens = _PROOF.parse(message, env)
    found: list[str] = []
    if any(token.level >= DEPTH_GUARD for token in tokens):
        found.append("nested too deep to prove")
    for token in tokens:
        children = token.children or []
        if any(child.level >= DEPTH_GUARD for child in children):
            found.append("nested too deep to prove")
        for child in children:
            if child.type == "image":
                found.append(f"image {child.attrGet('src')!r}")
            elif links and child.type == "link_open":
                found.append(f"link {child.attrGet('href')!r}")
        if links:
            for run in _text_runs(children):
                found.extend(f"bare URL at {m.group()!r}" for m in PROOF_URL.finditer(run))
    if links:
        found.extend(f"reference definition {label!r}" for label in env.get("references", {}))
    if last_paragraph is not None:
        tail = [(t.type, t.level, t.content) for t in tokens[-3:]]
        wanted = [
            ("paragraph_open", 0, ""),
            ("inline", 1, last_paragraph),
            ("paragraph_close", 0, ""),
        ]
        if tail != wanted:
            found.append("the last paragraph is not the notice")
    return found
