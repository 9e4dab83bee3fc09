"""The memory block's layout and its budgets, shared by memoryd and loopd. Pure; no I/O.

memoryd builds the block within `BLOCK_BYTES` of UTF-8; loopd fits what it gets to
a token budget of its own. Both follow these rules (docs/memoryd.md has the why):

1. Layout (`render_block`): the soul's text, then `## Memory` and memory.md's
   entry texts, then `## About the owner` and user.md's, every part apart from the
   next by one blank line. An empty soul is left out, and so is a heading with no
   entry under it. Entries keep the order they are given in, memory's before user's.
2. Spans: beside the text, the reply says how many code points at its head are
   the soul's and where each entry's text lies (`start`, `end`, in code points).
   An entry's text may hold blank lines and headings of its own, so a reader cuts
   the block by the spans, never by reading the text. `split_block` rebuilds the
   parts from the spans and renders them again: a text that does not come back
   exactly is refused (ValueError), so nothing is cut from a block that was misread.
   A reply with neither (soul 0, no spans: a peer that sends only the text) is
   read as one piece, a soul: it can be cut, but no entry in it can be named.
3. Fitting (`fit_block`, with a `fits` test: bytes for memoryd, the model's own
   tokens for loopd): a soul that alone does not fit is cut to its longest prefix
   that does, and then no entry is kept; otherwise entries are kept in order while
   the block with the next one still fits. The first that does not, and every
   entry after it, are left out whole (never cut), with the rule `over-budget`.
   The search tries 1, 2, 4, ... entries and then halves the gap, so a block of
   any size is judged in a few tests of a text not much larger than what fits.
4. An identity entry that cannot fit even alone under its heading (`alone_bytes`
   over BLOCK_BYTES) can never be in a block: memoryd refuses to write one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

BLOCK_BYTES = 16_384  # memoryd's block, at most (about 4,000 tokens at the least)
OVER_BUDGET = "over-budget"  # the rule of an entry left out for want of room
LOGGED_IDS = 50  # ids one log line names of the entries left out (the rest are counted)
HEADINGS = {"memory": "## Memory", "user": "## About the owner"}
_GAP = "\n\n"

Fits = Callable[[str], bool]


@dataclass(frozen=True)
class BlockEntry:
    """An identity entry as the block holds it."""

    id: str
    kind: str  # "memory" | "user"
    text: str


@dataclass(frozen=True)
class Span:
    """Where an entry's text lies in a block's text, in code points."""

    id: str
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Rendered:
    """A block's text, how much of its head is the soul's, and its entries' spans."""

    text: str
    soul: int
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class Fitted:
    """A block cut to a budget: what is kept, rendered, and the entries left out."""

    block: Rendered
    soul_cut: bool
    left_out: tuple[BlockEntry, ...]


def render_block(soul: str, entries: Sequence[BlockEntry]) -> Rendered:
    """The block of `soul` and `entries` (rule 1), with its spans (rule 2)."""
    pieces: list[str] = []
    spans: list[Span] = []
    at = 0

    def put(text: str) -> int:
        nonlocal at
        if pieces:
            at += len(_GAP)
        pieces.append(text)
        start, at = at, at + len(text)
        return start

    if soul:
        put(soul)
    for kind, heading in HEADINGS.items():
        of_kind = [e for e in entries if e.kind == kind]
        if of_kind:
            put(heading)
        for entry in of_kind:
            start = put(entry.text)
            spans.append(Span(entry.id, kind, start, start + len(entry.text)))
    return Rendered(_GAP.join(pieces), len(soul), tuple(spans))


def split_block(text: str, soul: int, spans: Sequence[Span]) -> tuple[str, list[BlockEntry]]:
    """The soul and entries of a block read back by its spans; ValueError when they do
    not render back to `text` exactly (rule 2)."""
    if soul == 0 and not spans:
        return text, []
    if not 0 <= soul <= len(text):
        raise ValueError("the soul's length is outside the block")
    entries: list[BlockEntry] = []
    for span in spans:
        if span.kind not in HEADINGS or not 0 <= span.start <= span.end <= len(text):
            raise ValueError(f"entry {span.id}'s span is outside the block")
        entries.append(BlockEntry(span.id, span.kind, text[span.start : span.end]))
    again = render_block(text[:soul], entries)
    if again.text != text or again.spans != tuple(spans):
        raise ValueError("the entries' spans do not match the block's text")
    return text[:soul], entries


def alone_bytes(kind: str, text: str) -> int:
    """The UTF-8 bytes of a block holding only this entry (rule 4)."""
    return len(render_block("", [BlockEntry("x", kind, text)]).text.encode(errors="surrogatepass"))


def fit_block(soul: str, entries: Sequence[BlockEntry], fits: Fits) -> Fitted:
    """`soul` and `entries` cut to what `fits` accepts (rule 3); `fits` must grow no
    kinder as a text grows."""
    whole = render_block(soul, entries)
    if fits(whole.text):
        return Fitted(whole, False, ())
    if not fits(soul):
        kept = soul[: _longest(len(soul) - 1, lambda n: fits(soul[:n]))]
        return Fitted(render_block(kept, ()), True, tuple(entries))
    count = _longest(len(entries) - 1, lambda n: fits(render_block(soul, entries[:n]).text))
    return Fitted(render_block(soul, entries[:count]), False, tuple(entries[count:]))


def _longest(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n in 0..most with fits(n), fits(0) taken as true: doubling, then
    halving the gap."""
    low, step = 0, 1
    while low + step <= most and fits(low + step):
        low += step
        step *= 2
    high = min(low + step, most + 1)  # fits(high) is false, or high is past most
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
