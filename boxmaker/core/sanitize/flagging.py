"""Flag: find text shaped like an attack. Pure; no I/O.

The rules (what a flag means for memory is 003 section 6.3; here only finding):

1. The text is normalised (`normalisation`) and every pattern of `flag_patterns`
   is run over the normalised text.
2. A pattern's anchor matches (at the start of a word, unless the pattern says
   otherwise); each of its `before` patterns must then be found in its window
   before the anchor, each `near` pattern in its window either side, and its
   `inside` pattern in the anchor's own match. Otherwise that anchor match is
   dropped and the scan goes on.
2a. A pattern with an `original` pattern fires only if that is found in the
   original text of the finding (rule 3's span): what normalisation folded away
   (`@`, `$`, digits) is still there.
3. A finding starts where its earliest part (a `before` match or the anchor)
   starts, mapped back to the original text, and its excerpt is the original
   text from there to the anchor's end: one line, cut in the middle when long,
   with any secret in it cut to its prefix.
4. One finding per rule and start; findings come in text order.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from functools import cache
from itertools import chain
from typing import NamedTuple

from boxmaker.core.sanitize.findings import Action, Finding, printable
from boxmaker.core.sanitize.flag_literals import AllNeeds, Keys
from boxmaker.core.sanitize.flag_patterns import PATTERNS, FlagPattern
from boxmaker.core.sanitize.normalisation import Normalised, fold, normalise
from boxmaker.core.sanitize.secret_prefixes import redact
from boxmaker.core.sanitize.word_pass import WordPass

REACH = 32  # how far past a window a free pattern's match may run (its longest is less)


class _Windows:
    """Finds `before` and `near` patterns around each anchor of one text.

    A pattern that ends in `$` must end where the anchor starts: it is searched in
    its window, which is no longer than its longest match. Any other ("free")
    must start within its window: it is searched there too, until the windows
    searched for it add up to the text's length; from then on its matches in the
    whole text are found once and looked up by bisection. So anchors packed close
    together cost no more than one more scan of the text per pattern.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.budget: dict[re.Pattern[str], int] = {}
        self.starts: dict[re.Pattern[str], list[int]] = {}

    def _free(self, pattern: re.Pattern[str], low: int, high: int) -> int | None:
        """The first start of `pattern` in `low`..`high` (exclusive), or None."""
        if pattern not in self.starts:
            left = self.budget.get(pattern, len(self.text)) - (high - low)
            self.budget[pattern] = left
            if left >= 0:
                found = pattern.search(self.text, low, min(len(self.text), high + REACH))
                return found.start() if found is not None and found.start() < high else None
            self.starts[pattern] = [m.start() for m in pattern.finditer(self.text)]
        positions = self.starts[pattern]
        index = bisect_left(positions, low)
        return positions[index] if index < len(positions) and positions[index] < high else None

    def earliest(
        self, wanted: tuple[tuple[re.Pattern[str], int], ...], begin: int, end: int | None
    ) -> int | None:
        """The earliest start of the `wanted` patterns, each within its window before
        `begin` (or, with `end`, from `window` before `begin` to `window` after
        `end`): None if one is missing."""
        starts: list[int] = []
        for pattern, window in wanted:
            low = max(0, begin - window)
            high = begin if end is None else min(len(self.text), end + window)
            if pattern.pattern.endswith("$"):
                found = pattern.search(self.text, low, high)
                start = None if found is None else found.start()
            else:
                start = self._free(pattern, low, high)
            if start is None:
                return None
            starts.append(start)
        return min(starts, default=begin)


def _starts_word(text: str, start: int) -> bool:
    return start == 0 or not (text[start - 1].isalnum() or text[start - 1] == "_")


Windowed = tuple[tuple[re.Pattern[str], int], ...]


class _Joined(NamedTuple):
    """A pattern's one `before` that ends at the anchor (`ending`, within `window`),
    that `before` and the anchor as one regex (`regex`), and its other `before`s."""

    regex: re.Pattern[str]
    ending: re.Pattern[str]
    window: int
    rest: Windowed


@cache
def _joined(pattern: FlagPattern) -> _Joined | None:
    """`_Joined` for a pattern with one `before` that ends at the anchor; None for any
    other pattern."""
    endings = [(before, window) for before, window in pattern.before if before.pattern[-1] == "$"]
    if len(endings) != 1:
        return None
    [(ending, window)] = endings
    joined = re.compile(f"(?:{ending.pattern[:-1]})(?P<anchor>{pattern.anchor.pattern})")
    rest = tuple(pair for pair in pattern.before if pair[0] is not ending)
    return _Joined(joined, ending, window, rest)


def _accept(
    pattern: FlagPattern, around: _Windows, start: int, end: int, before: Windowed
) -> int | None:
    """Where a finding for the anchor at `start`..`end` starts, or None (rule 2)."""
    text = around.text
    if pattern.word_start and not _starts_word(text, start):
        return None
    if pattern.inside is not None and pattern.inside.search(text, start, end) is None:
        return None
    if pattern.near and around.earliest(pattern.near, start, end) is None:
        return None
    return around.earliest(before, start, None) if before else start


def anchors(
    pattern: FlagPattern, text: str, shadow: bytes | None = None
) -> Iterator[re.Match[str]]:
    """The matches of `pattern.anchor` in `text`, as its `finditer` gives them; where the
    anchor has `Keys` and they are few in `text`, by searching only the windows around
    them (each match holds a key, so it starts in one; a search there reads no further
    than the window's `reach`, so it finds what the whole scan finds). `shadow`:
    `text`'s ASCII shadow, where the keys are found (`Keys.windows`)."""
    keys = Keys.of(pattern)
    windows = None if keys is None else keys.windows(text, shadow)
    if keys is None or windows is None:
        yield from pattern.anchor.finditer(text)
        return
    search = pattern.anchor.search
    reach = keys.reach
    done = 0  # where the last match ended: the whole scan goes on from there
    for low, high in windows:
        position = low if low > done else done
        while position < high:
            found = search(text, position, high + reach)  # (`re` cuts an end past the text)
            if found is None or found.start() >= high:
                break
            yield found
            done = position = found.end()


def spans(
    pattern: FlagPattern,
    text: str,
    windows: _Windows | None = None,
    budget: int | None = None,
    matches: Iterable[re.Match[str]] | None = None,
) -> list[tuple[int, int]]:
    """Where `pattern` fires in normalised `text`: (start, end) of each finding (rule 2).

    Anchors are checked one by one, searching each window. When the windows of a
    pattern whose `before` ends at the anchor add up to the text's length (anchors
    packed close, as an attack on the scan would pack them), the rest of the text
    is scanned with that `before` and the anchor joined into one regex, and only
    the anchors whose window reaches one of its matches are checked, each from
    there (`_joined_spans`): the same findings. (`budget`, for tests: how many
    window characters before that; the default is the text's length. `matches`: the
    anchor's matches, when not `pattern.anchor.finditer(text)`, as `anchors` finds
    them.)
    """
    around = windows or _Windows(text)
    joined = _joined(pattern)
    budget = len(text) if budget is None else budget
    out: list[tuple[int, int]] = []
    found = iter(pattern.anchor.finditer(text) if matches is None else matches)
    for match in found:
        start, end = match.span()
        if joined is not None:
            budget -= joined.window
            if budget < 0:
                return out + _joined_spans(pattern, around, joined, chain([match], found))
        first = _accept(pattern, around, start, end, pattern.before)
        if first is not None:
            out.append((first, end))
    return out


def _joined_spans(
    pattern: FlagPattern, around: _Windows, joined: _Joined, matches: Iterator[re.Match[str]]
) -> list[tuple[int, int]]:
    """`spans` for the anchors `matches` (the rest of them, in text order).

    An anchor's ending, if it has one, starts inside a match of the joined regex
    scanned from the first anchor's window on: were it in a gap between two, the
    scan would have found a match starting there. So an anchor whose window reaches
    no such match has no ending, and one whose window does has its earliest ending
    from the later of its window's start and that match's start. (A joined match may
    end past anchors whose endings start inside it, so each such anchor is still
    checked: checking only the anchor a match ends at would miss them.)
    """
    text = around.text
    out: list[tuple[int, int]] = []
    scan: Iterator[re.Match[str]] | None = None
    cover: re.Match[str] | None = None
    for match in matches:
        start, end = match.span()
        low = max(0, start - joined.window)
        if scan is None:
            scan = joined.regex.finditer(text, low)
            cover = next(scan, None)
        while cover is not None and cover.end() <= low:
            cover = next(scan, None)
        if cover is None:
            break  # no joined match from here on: no anchor left has its ending
        if cover.start() >= start:
            continue
        ending = joined.ending.search(text, max(low, cover.start()), start)
        if ending is None:
            continue
        first = _accept(pattern, around, start, end, joined.rest)
        if first is not None:
            out.append((min(first, ending.start()), end))
    return out


def _in_original(normalised: Normalised, pattern: FlagPattern, first: int, last: int) -> bool:
    """Rule 2a for the original span `first`..`last`."""
    if pattern.original is None:
        return True
    return pattern.original.search(normalised.original, first, last) is not None


def _finding(normalised: Normalised, pattern: FlagPattern, start: int, end: int) -> Finding | None:
    """The finding for normalised `start`..`end`, or None if `pattern.original` is not
    in its original text (rule 2a)."""
    first, last = normalised.span(start, end)
    if not _in_original(normalised, pattern, first, last):
        return None
    excerpt = printable(redact(normalised.original, first, last))
    return Finding(Action.FLAG, pattern.rule, first, excerpt)


@cache
def _all_needs() -> AllNeeds:
    return AllNeeds.of(PATTERNS)  # (once: a tuple of patterns is slow to hash)


@cache
def _word_pass() -> WordPass:
    return WordPass.of(_all_needs().vocabulary)


def prepare() -> None:
    """Build what `flag_rule` builds once (the folding table, every pattern's `Needs`
    and `Keys`, the joined regexes, the word pass): brokerd calls it at start, so
    that no tool call waits for it (about a second on a busy machine)."""
    fold("")
    _word_pass()("")
    for pattern in PATTERNS:
        Keys.of(pattern)
        _joined(pattern)


def flag_rule(text: str) -> str | None:
    """The rule of a flag finding in `text` (the first pattern's, in `PATTERNS` order,
    that fires), or None when nothing fires: whether `flag` finds anything, without
    the excerpts, and stopping at the first. brokerd labels a tool result by it.

    The fast path: the whole text folded at once, and its words that any `Needs`
    holds found in the same pass, with its ASCII shadow for the strings and keys
    (`word_pass`; `fold` gives the text `normalise` gives without its map back,
    built only for a pattern with an `original`), a
    pattern whose `Needs` the text does not meet skipped without running it, and an
    anchor with `Keys` searched for only around them (`anchors`)."""
    folded, words, shadow = _word_pass()(text)
    met = _all_needs().met(folded, words, shadow)
    windows = _Windows(folded)
    normalised: Normalised | None = None
    for pattern, needed in zip(PATTERNS, met, strict=True):
        if not needed:
            continue
        matches = anchors(pattern, folded, shadow)
        for start, end in spans(pattern, folded, windows, matches=matches):
            if pattern.original is None:
                return pattern.rule
            normalised = normalised or normalise(text)
            if _in_original(normalised, pattern, *normalised.span(start, end)):
                return pattern.rule  # rule 2a, mapping back only where it is needed
    return None


def flag(text: str) -> list[Finding]:
    """Every flag finding in `text`, in text order (rules 1 to 4)."""
    normalised = normalise(text)
    seen: set[tuple[str, int]] = set()
    findings: list[Finding] = []
    windows = _Windows(normalised.text)
    for pattern in PATTERNS:
        for start, end in spans(pattern, normalised.text, windows):
            finding = _finding(normalised, pattern, start, end)
            if finding is not None and (finding.rule, finding.start) not in seen:
                seen.add((finding.rule, finding.start))
                findings.append(finding)
    return sorted(findings, key=lambda f: (f.start, f.rule))
