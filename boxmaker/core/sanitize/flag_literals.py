"""The words a flag pattern cannot match without: a cheap test that rules it out. Pure; no I/O.

`Needs.of(pattern)` reads the parse trees of a flag pattern's regexes (with the
standard library's own parser, so it reads exactly what `re` runs) and returns
what every text it fires on holds; `Needs.met(text, words)` checks that in C
(set operations and a few substring searches), so `flagging` skips a pattern
there without running it. The rules:

1. Each part of a regex's tree is known by: `exact`, every string it matches
   when they are at most `EXACT`; else `clauses`, sets of strings at least one
   of which each match contains, and `starts` and `ends`, strings each
   non-empty match starts and ends with (the empty string among them: nothing
   known), and whether it can match empty.
2. A literal character is exactly itself; a class of at most `FEW` listed
   characters (`[li]`, `[a-z]`) exactly one of them; `\\b` exactly `MARK`, a
   word boundary; any other assertion (`$`, a lookaround) exactly the empty
   string. Anything else (a negated or larger class, a group with flags such
   as `(?i:...)`, a back reference) is known by nothing.
3. A sequence multiplies the exact sets of neighbouring parts out while the
   product stays at most `EXACT`; at a part where it would not, or a part that
   is not exact, the run so far (followed by the part's starts) is a clause, the
   part's clauses are kept, and the run goes on from the part's ends (and, when
   the part can match empty, from the run as it was too); from an exact part,
   from the run's ends cut short enough to be multiplied by it.
4. An alternation of exact branches is exact while their union is at most
   `EXACT`; otherwise it needs the union of each branch's best clause (nothing
   when a branch needs nothing). A repeat at least once needs what its body
   needs (an exact body written out its least number of times); `{0,1}` of an
   exact body is exact with the empty string added; `{n}` of one is its power.
5. A pattern that must start a word (`FlagPattern.word_start`) starts with `MARK`.
   In the normalised text every letter is a-z, so a run of a-z in a clause's
   string with a non-letter or `MARK` on both sides is a whole word of the text
   (a maximal run of a-z): a string is in the text only if its longest such
   word is one of the text's words. A clause whose every string has such a word
   is checked as a set of words; a clause of at most `SEARCHED` strings that
   have none is searched for in the text (its `MARK`s left out); any other
   clause is not checked.

Every step only weakens what is known: a pattern the checks rule out can match
nowhere in the text; one they do not rule out is run. `AllNeeds` checks every
pattern's words at once.

6. `Keys`: for an anchor not led by a literal, at most `KEYS` strings, each part of
   the strings of one of its clauses, that each of those holds one of: every match
   holds one, so `flagging` searches for the anchor only in the windows before
   them, as wide as its widest match.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, AnyStr

with warnings.catch_warnings():  # the parser `re` itself runs, kept under this name
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as sre
    import sre_parse

if TYPE_CHECKING:
    from boxmaker.core.sanitize.flag_patterns import FlagPattern

EXACT = 1024  # the most strings an exact set holds
FEW = 26  # the most characters a class may list and still be exact
SEARCHED = 3  # the most strings of a clause with no whole word that are searched for
MARK = "\x00"  # a word boundary: the characters either side are not both word characters

_WORD = re.compile("[a-z]+")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")

Strings = frozenset[str]


@dataclass(frozen=True, slots=True)
class _Info:
    """What is known of the matches of one part of a regex (rule 1)."""

    exact: Strings | None
    clauses: tuple[Strings, ...] = ()
    starts: Strings = frozenset({""})
    ends: Strings = frozenset({""})
    empty: bool = True


def _exact(strings: Strings) -> _Info:
    return _Info(strings, (), strings, strings, "" in strings)


_NOTHING = _Info(None)
_EMPTY = _exact(frozenset({""}))


def _fit(strings: Strings, keep_start: bool, most: int = EXACT) -> Strings:
    """`strings` cut (each to its start, or to its end) until at most `most` remain."""
    for size in range(max(map(len, strings), default=0), -1, -1):
        cut = frozenset(s[:size] if keep_start else s[len(s) - size :] for s in strings)
        if len(cut) <= most:
            return cut
    return frozenset({""})


def _product(left: Strings, right: Strings) -> Strings | None:
    if len(left) * len(right) > EXACT:
        return None
    return frozenset(a + b for a in left for b in right)


def _clauses_of(info: _Info) -> tuple[Strings, ...]:
    return (info.exact,) if info.exact is not None else info.clauses


def _class(items: list[tuple[sre._NamedIntConstant, object]]) -> _Info:
    chars: set[str] = set()
    for op, value in items:
        if op is sre.LITERAL and isinstance(value, int):
            chars.add(chr(value))
        elif op is sre.RANGE and isinstance(value, tuple) and value[1] - value[0] < FEW:
            chars.update(chr(code) for code in range(value[0], value[1] + 1))
        else:  # NEGATE, CATEGORY, a wide range
            return _NOTHING
    return _exact(frozenset(chars)) if len(chars) <= FEW else _NOTHING


def _sequence(parts: Iterable[_Info]) -> _Info:
    """Rule 3."""
    clauses: list[Strings] = []
    run: Strings = frozenset({""})
    starts: Strings | None = None  # set at the first part that breaks the run
    empty = True
    for info in parts:
        empty = empty and info.empty
        if info.exact is not None:
            joined = _product(run, info.exact)
            if joined is not None:
                run = joined
                continue
        led = run if info.empty else (_product(run, info.starts) or run)
        clauses.append(led)
        starts = led if starts is None else starts
        clauses.extend(_clauses_of(info))
        if info.exact is not None:  # the run's ends, cut short enough, then the part
            tail = _fit(run, keep_start=False, most=max(1, EXACT // max(1, len(info.exact))))
            run = _product(tail, info.exact) or info.exact
        else:
            run = _fit(info.ends | run if info.empty else info.ends, keep_start=False)
    if starts is None:
        return _exact(run)
    clauses.append(run)
    return _Info(None, tuple(clauses), starts, run, empty)


def _words(string: str) -> list[str]:
    """The runs of a-z in `string` with a non-letter on both sides (rule 5)."""
    return [
        match.group()
        for match in _WORD.finditer(string)
        if match.start() > 0 and match.end() < len(string)
    ]


@cache
def _word(string: str) -> str | None:
    words = _words(string)
    return max(words, key=lambda word: (len(word), word)) if words else None


@cache
def _as_words(clause: Strings) -> frozenset[str] | None:
    """The clause as whole words of the text (rule 5), or None where one string has none."""
    words = {_word(string) for string in clause}
    return None if None in words else frozenset(w for w in words if w is not None)


def _rank(clause: Strings) -> tuple[int, int]:
    """How much a clause rules out: by words first, then by its shortest string."""
    words = _as_words(clause)
    if words is not None:
        return (2, min(map(len, words)))
    shortest = min(len(s.replace(MARK, "")) for s in clause)
    return (1 if shortest else 0, shortest)


def _best(clauses: tuple[Strings, ...]) -> Strings | None:
    useful = [clause for clause in clauses if _rank(clause)[0] > 0]
    return max(useful, key=lambda clause: (_rank(clause), -len(clause))) if useful else None


def _branch(branches: list[sre_parse.SubPattern]) -> _Info:
    """Rule 4, for an alternation."""
    infos = [_tree(branch) for branch in branches]
    if all(info.exact is not None for info in infos):
        union = frozenset().union(*(info.exact or () for info in infos))
        if len(union) <= EXACT:
            return _exact(union)
    chosen = [_best(_clauses_of(info)) for info in infos]
    clauses = () if None in chosen else (frozenset().union(*(c or () for c in chosen)),)
    return _Info(
        None,
        clauses,
        _fit(frozenset().union(*(info.starts for info in infos)), keep_start=True),
        _fit(frozenset().union(*(info.ends for info in infos)), keep_start=False),
        any(info.empty for info in infos),
    )


def _repeat(low: int, high: int, body: sre_parse.SubPattern) -> _Info:
    """Rule 4, for a repeat."""
    info = _tree(body)
    if info.exact is not None:
        if low == 0 and high == 1:
            return _exact(info.exact | {""})
        least: Strings | None = frozenset({""})
        for _ in range(low):
            least = None if least is None else _product(least, info.exact)
        if least is not None and low == high:
            return _exact(least)
        some = info.exact if least is None or low == 0 else least
        return _Info(None, (some,) if low else (), some, some, low == 0 or "" in info.exact)
    return _Info(None, info.clauses if low else (), info.starts, info.ends, low == 0 or info.empty)


def _part(op: sre._NamedIntConstant, value: object) -> _Info:
    """Rules 2 to 4 for one node of the parse tree."""
    if op is sre.LITERAL and isinstance(value, int):
        return _exact(frozenset({chr(value)}))
    if op is sre.IN and isinstance(value, list):
        return _class(value)
    if op is sre.AT:
        return _exact(frozenset({MARK})) if value is sre.AT_BOUNDARY else _EMPTY
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return _EMPTY
    if op is sre.BRANCH and isinstance(value, tuple):
        return _branch(value[1])
    if op is sre.SUBPATTERN and isinstance(value, tuple):
        _group, add_flags, del_flags, body = value
        return _NOTHING if add_flags or del_flags else _tree(body)
    if op is sre.ATOMIC_GROUP and isinstance(value, sre_parse.SubPattern):
        return _tree(value)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT) and isinstance(value, tuple):
        low, high, body = value
        return _repeat(low, high, body)
    return _NOTHING


def _tree(parts: sre_parse.SubPattern, lead: tuple[_Info, ...] = ()) -> _Info:
    return _sequence((*lead, *(_part(op, value) for op, value in parts.data)))


def _clauses(pattern: re.Pattern[str], word_start: bool = False) -> tuple[Strings, ...]:
    if pattern.flags & re.IGNORECASE:
        return ()
    lead = (_exact(frozenset({MARK})),) if word_start else ()
    tree = sre_parse.parse(pattern.pattern, pattern.flags)
    return tuple(clause for clause in _clauses_of(_tree(tree, lead)) if _rank(clause)[0] > 0)


@dataclass(frozen=True, slots=True)
class Needs:
    """What a text must hold for a pattern to fire in it (rule 5)."""

    words: tuple[frozenset[bytes], ...]  # for each, one of them is a word of the text
    strings: tuple[tuple[str, ...], ...]  # for each, one of them is in the text

    @staticmethod
    @cache
    def of(pattern: FlagPattern) -> Needs:
        found = list(_clauses(pattern.anchor, pattern.word_start))
        for regex, _window in (*pattern.before, *pattern.near):
            found.extend(_clauses(regex))
        if pattern.inside is not None:
            found.extend(_clauses(pattern.inside))
        words: set[frozenset[bytes]] = set()
        strings: set[tuple[str, ...]] = set()
        for clause in found:
            as_words = _as_words(clause)
            if as_words is not None:
                words.add(frozenset(word.encode() for word in as_words))
            elif len(clause) <= SEARCHED:
                strings.add(tuple(sorted(s.replace(MARK, "") for s in clause)))
        return Needs(tuple(sorted(words, key=len)), tuple(sorted(strings)))

    def met(self, text: str, words: frozenset[bytes] | set[bytes]) -> bool:
        """Whether normalised `text`, whose words (runs of a-z) are `words`, holds it all."""
        return all(not need.isdisjoint(words) for need in self.words) and all(
            any(string in text for string in need) for need in self.strings
        )


@dataclass(frozen=True, slots=True)
class AllNeeds:
    """The `Needs` of several patterns, checked at once: each need of words is a bit,
    and each word sets the bits of the needs it is in, so the text's words are looked
    up once for all of them."""

    bits: dict[bytes, int]  # each word a need holds: the bits of the needs holding it
    vocabulary: frozenset[bytes]  # those words
    wanted: tuple[int, ...]  # for each pattern, the bits of its needs of words
    strings: tuple[tuple[tuple[str, ...], ...], ...]  # for each pattern, `Needs.strings`
    # the same as bytes, where every one is ASCII (as every production one is): found
    # in a text's ASCII shadow (`word_pass`) at the same places, faster; else None
    ascii: tuple[tuple[tuple[bytes, ...], ...], ...] | None

    @staticmethod
    @cache
    def of(patterns: tuple[FlagPattern, ...]) -> AllNeeds:
        bits: dict[bytes, int] = {}
        wanted: list[int] = []
        index = 0
        for pattern in patterns:
            mask = 0
            for need in Needs.of(pattern).words:
                for word in need:
                    bits[word] = bits.get(word, 0) | 1 << index
                mask |= 1 << index
                index += 1
            wanted.append(mask)
        strings = tuple(Needs.of(pattern).strings for pattern in patterns)
        flat = [s for of_pattern in strings for need in of_pattern for s in need]
        ascii = None
        if all(s.isascii() for s in flat):
            ascii = tuple(
                tuple(tuple(s.encode() for s in need) for need in of_pattern)
                for of_pattern in strings
            )
        return AllNeeds(bits, frozenset(bits), tuple(wanted), strings, ascii)

    def met(self, text: str, words: Iterable[bytes], shadow: bytes | None = None) -> list[bool]:
        """For each pattern, `Needs.of(pattern).met(text, set(words))` (the words first;
        `words` may repeat, as `tokens_of` gives them). `shadow`: `text`'s ASCII shadow
        (`word_pass`), where the strings are looked for if given."""
        found = 0
        for word in self.vocabulary.intersection(words):
            found |= self.bits[word]
        if shadow is not None and self.ascii is not None:
            return [
                found & mask == mask and all(any(s in shadow for s in need) for need in strings)
                for mask, strings in zip(self.wanted, self.ascii, strict=True)
            ]
        return [
            found & mask == mask and all(any(s in text for s in need) for need in strings)
            for mask, strings in zip(self.wanted, self.strings, strict=True)
        ]


KEYS = 3  # the most strings `Keys` searches for
KEY_SHORTEST = 3  # the shortest of them
KEY_LONGEST = 8  # the longest
WIDEST = 512  # the widest anchor match `Keys` windows
SPARSE = 256  # `Keys` windows a text with at most one key in this many characters


def _parts(string: str) -> set[str]:
    """The parts of `string` that `_cover` may choose: its substrings of `KEY_SHORTEST`
    to `KEY_LONGEST` characters."""
    return {
        string[i : i + size]
        for size in range(KEY_SHORTEST, KEY_LONGEST + 1)
        for i in range(len(string) - size + 1)
    }


def _cover(clause: Strings) -> tuple[str, ...] | None:
    """Few strings, each in a string of `clause`, that each string of it holds one of,
    chosen greedily: the most strings held first, then a non-letter, then longest,
    then the first in sorted order. (Each part is counted once per string that holds
    it, in one pass over the parts of each string: a clause holds up to `EXACT`
    strings, and counting each part in every string took seconds.)"""
    left = {string.replace(MARK, "") for string in clause}
    chosen: list[str] = []
    while left and len(chosen) < KEYS:
        held: dict[str, int] = {}
        for string in left:
            for part in _parts(string):
                held[part] = held.get(part, 0) + 1
        if not held:
            return None

        ranks = {
            part: (count, not set(part) <= _LETTERS, len(part)) for part, count in held.items()
        }
        top = max(ranks.values())
        best = min(part for part, rank in ranks.items() if rank == top)
        chosen.append(best)
        left = {string for string in left if best not in string}
    return None if left else tuple(chosen)


def _lookahead(parts: sre_parse.SubPattern) -> int:
    """An upper bound of how far lookarounds in `parts` read past a match's end."""
    total = 0
    for op, value in parts.data:
        if op in (sre.ASSERT, sre.ASSERT_NOT) and isinstance(value, tuple):
            total += value[1].getwidth()[1] + _lookahead(value[1])
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, sre_parse.SubPattern):
                    total += _lookahead(item)
                elif isinstance(item, list):
                    total += sum(_lookahead(b) for b in item if isinstance(b, sre_parse.SubPattern))
        elif isinstance(value, sre_parse.SubPattern):
            total += _lookahead(value)
    return total


@dataclass(frozen=True, slots=True)
class Keys:
    """Strings of which every match of a pattern's anchor holds one, and how wide a
    match is: the anchor can match only in windows around where they are.

    A match of at most `width` characters that holds a key at `k` starts from
    `k + len(key) - width` to `k`; `re`, searching for a match starting there, reads
    no further than `reach` characters past the window (the width, and one character
    for a `\\b` or `$`, and what a lookahead reads)."""

    strings: tuple[str, ...]
    width: int
    reach: int

    @staticmethod
    @cache
    def of(pattern: FlagPattern) -> Keys | None:
        """The anchor's keys, or None where no clause of it has `KEYS` or fewer."""
        anchor = pattern.anchor
        tree = sre_parse.parse(anchor.pattern, anchor.flags)
        low, high = tree.getwidth()
        if low == 0 or high > WIDEST or tree.data[0][0] is sre.LITERAL:
            return None  # (led by a literal, `re` skips ahead to it as fast as a find)
        covers = [cover for c in _clauses(anchor) if (cover := _cover(c)) is not None]
        if not covers:
            return None
        best = min(covers, key=lambda cover: (len(cover), -min(map(len, cover))))
        return Keys(best, high, high + 1 + _lookahead(tree))

    def windows(self, text: str, shadow: bytes | None = None) -> list[tuple[int, int]] | None:
        """Where in `text` a match may start: sorted, disjoint (start, end) ranges, from
        `width` before each key to the key (those less than `width` apart joined); None
        where the keys are more than one in `SPARSE` characters (one scan is cheaper).
        `shadow`: `text`'s ASCII shadow (`word_pass`), where ASCII keys are found at
        the same places, faster."""
        most = 1 + len(text) // SPARSE
        found: list[int] = []
        for key in self.strings:
            if shadow is not None and key.isascii():
                starts = _starts(shadow, key.encode())
            else:
                starts = _starts(text, key)
            for at in starts:
                if len(found) == most:
                    return None
                found.append(at + 1)
        found.sort()
        width = self.width
        merged: list[tuple[int, int]] = []
        low = high = -2 * width
        for end in found:
            if end - width > high + width:
                if high > 0:
                    merged.append((max(0, low), high))
                low = end - width
            high = end
        if high > 0:
            merged.append((max(0, low), high))
        return merged


def _starts(haystack: AnyStr, needle: AnyStr) -> Iterator[int]:
    """Every start of `needle` in `haystack`, overlapping ones too."""
    at = haystack.find(needle)
    while at >= 0:
        yield at
        at = haystack.find(needle, at + 1)


_NOT_LETTERS = bytes(code if chr(code) in _LETTERS else ord(" ") for code in range(256))


def tokens_of(text: str) -> list[bytes]:
    """Each word of normalised `text`, in order: its maximal runs of a-z (bytes, as
    `Needs` holds them)."""
    return text.encode("utf-8", "surrogatepass").translate(_NOT_LETTERS).split()


def words_of(text: str) -> set[bytes]:
    """The words of normalised `text` (`tokens_of`, each once)."""
    return set(tokens_of(text))
