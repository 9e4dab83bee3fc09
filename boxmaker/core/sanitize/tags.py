"""Chat-template tags: the default list, refusing them in memory, neutralising them. Pure; no I/O.

`MEMORY_TAGS` are the tags of every format loopd knows (`boxmaker.core.model.chat_format`
`KNOWN_FORMATS`, each format's `markers`: begin and end of text, turn and role
markers, stops), then the think,
tool-call and tool-response tags and gemma's image markers. Like the spec's list
(003 section 6.2) they are built from pieces here, never written whole, so that
this file is not itself a prompt-breaking text. The loaded model's own list
(with token ids) is loopd's; `neutralise` takes any list.

The rules:

1. Refuse (`template-tag`, memory writes only): every occurrence of a tag of
   `MEMORY_TAGS`, matched exactly (case and all), as a tokenizer matches it.
2. Neutralise (`neutralised-tag`): every occurrence of a listed tag has each of
   its angle brackets turned into a look-alike, `<` into U+2039 SINGLE
   LEFT-POINTING ANGLE QUOTATION MARK and `>` into U+203A SINGLE RIGHT-POINTING
   ANGLE QUOTATION MARK; the rest of the text is left as it is, so the model still
   reads "the think tag" but the tokenizer sees ordinary characters. These two
   were chosen over the full-width forms (U+FF1C, U+FF1E) because NFKC does not
   fold them back to `<` and `>`: a tokenizer or a later step that normalises
   NFKC (some SentencePiece models do) would re-form the tag from full-width
   brackets, never from these. A bracket-shaped tag (Mistral's instruction
   markers, Gemma's multimodal marker, the padding tokens some vocabularies
   hold) has its square brackets turned the same way, `[` into U+2045 LEFT
   SQUARE BRACKET WITH QUILL and `]` into U+2046 RIGHT SQUARE BRACKET WITH
   QUILL (again not folded by NFKC, unlike the full-width U+FF3B and U+FF3D).
3. Longer tags are matched first where two start at one place, and the scan is
   repeated until no tag is left, so overlapping tags in a hostile list cannot
   leave one standing. Each pass removes at least one bracket, so it ends. A
   listed tag with no angle bracket or square bracket cannot be disarmed this
   way: ValueError.
4. Replacing one character by one keeps every offset, so a finding's start is
   its place in the text given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from boxmaker.core.model.chat_format import KNOWN_FORMATS
from boxmaker.core.sanitize.findings import Action, Finding, Neutralised

REFUSED = "template-tag"
NEUTRALISED = "neutralised-tag"

OPEN, CLOSE = "<", ">"
OPEN_LOOKALIKE = "\N{SINGLE LEFT-POINTING ANGLE QUOTATION MARK}"
CLOSE_LOOKALIKE = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"
SQUARE_OPEN, SQUARE_CLOSE = "[", "]"
SQUARE_OPEN_LOOKALIKE = "\N{LEFT SQUARE BRACKET WITH QUILL}"
SQUARE_CLOSE_LOOKALIKE = "\N{RIGHT SQUARE BRACKET WITH QUILL}"
_DISARM = str.maketrans(
    {
        OPEN: OPEN_LOOKALIKE,
        CLOSE: CLOSE_LOOKALIKE,
        SQUARE_OPEN: SQUARE_OPEN_LOOKALIKE,
        SQUARE_CLOSE: SQUARE_CLOSE_LOOKALIKE,
    }
)
_BRACKETS = frozenset(OPEN + CLOSE + SQUARE_OPEN + SQUARE_CLOSE)


def _angle(name: str) -> str:
    return OPEN + name + CLOSE


def _format_tags() -> list[str]:
    """Every marker of every format loopd knows (`ChatFormat.markers`: begin of text,
    turn and role markers, stops), derived from the one list of formats."""
    return [marker for chat in KNOWN_FORMATS.values() for marker in chat.markers]


_OTHER_TAGS = [
    _angle(slash + name) for name in ("think", "tool_call", "tool_response") for slash in ("", "/")
] + [_angle(edge + "_of_image") for edge in ("start", "end")]

MEMORY_TAGS: tuple[str, ...] = tuple(dict.fromkeys(t for t in _format_tags() + _OTHER_TAGS if t))


@lru_cache(maxsize=32)
def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern[str] | None:
    if not tags:
        return None
    for tag in tags:
        if _BRACKETS.isdisjoint(tag):
            raise ValueError(f"tag {tag!r} has no angle bracket or square bracket to neutralise")
    return re.compile(trie_pattern(tags))


def trie_pattern(words: Iterable[str]) -> str:
    """A regular expression matching any of `words`, the longest where several match
    at one place: the words as a prefix tree, so a match costs the length of the
    text, not the number of words (a model lists thousands of markers). Each
    node's longer continuations are tried before it ends (a greedy optional
    group), and backtracking falls back to a shorter word, as an alternation of
    the words longest first would."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # the end of a word
    return _node_pattern(root)


def _node_pattern(node: dict[str, Any]) -> str:
    branches = [
        re.escape(char) + _node_pattern(child) for char, child in sorted(node.items()) if char
    ]
    if not branches:
        return ""
    inner = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" in node:  # a word ends here: going on is optional, and tried first
        return inner + "?" if len(branches) == 1 and len(inner) == 1 else f"(?:{inner})?"
    return inner


def refused_tags(text: str) -> list[Finding]:
    """One refuse finding per `MEMORY_TAGS` tag in `text` (rule 1)."""
    pattern = _tag_pattern(MEMORY_TAGS)
    assert pattern is not None
    return [Finding(Action.REFUSE, REFUSED, m.start(), m.group()) for m in pattern.finditer(text)]


_last: tuple[tuple[str, ...], re.Pattern[str] | None] | None = None


def _pattern(tags: Sequence[str]) -> re.Pattern[str] | None:
    """`_tag_pattern` of `tags`, remembering the last tuple by identity: loopd passes
    the same tuple of thousands of markers for every text, and hashing and
    comparing it for the cache would cost more than the match."""
    global _last
    last = _last
    if last is not None and last[0] is tags:
        return last[1]
    frozen = tags if isinstance(tags, tuple) else tuple(tags)
    pattern = _tag_pattern(frozen)
    if frozen is tags:  # a tuple cannot change: safe to know it by identity
        _last = (frozen, pattern)
    return pattern


def _disarm(text: str, tags: Sequence[str]) -> tuple[str, list[Finding]]:
    pattern = _pattern(tags)
    findings: list[Finding] = []
    while pattern is not None:
        found = list(pattern.finditer(text))
        if not found:
            break
        pieces: list[str] = []
        last = 0
        for match in found:
            findings.append(Finding(Action.NEUTRALISE, NEUTRALISED, match.start(), match.group()))
            pieces += [text[last : match.start()], match.group().translate(_DISARM)]
            last = match.end()
        text = "".join(pieces) + text[last:]
    return text, findings


def neutralise(text: str, tags: Sequence[str]) -> Neutralised:
    """`text` with every listed tag's brackets turned into look-alikes (rule 2)."""
    disarmed, findings = _disarm(text, tags)
    return Neutralised(disarmed, len(findings))


def neutralised_tags(text: str, tags: Sequence[str]) -> list[Finding]:
    """One neutralise finding per tag `neutralise` would disarm, at its place in `text`."""
    return _disarm(text, tags)[1]
