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
   the part can match empty, from the run as it was too).
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
nowhere in the text; one they do not rule out is run.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

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


def _fit(strings: Strings, keep_start: bool) -> Strings:
    """`strings` cut (each to its start, or to its end) until at most EXACT remain."""
    for size in range(max(map(len, strings), default=0), -1, -1):
        cut = frozenset(s[:size] if keep_start else s[len(s) - size :] for s in strings)
        if len(cut) <= EXACT:
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


_NOT_LETTERS = bytes(code if chr(code) in _LETTERS else ord(" ") for code in range(256))


def words_of(text: str) -> set[bytes]:
    """The words of normalised `text`: its maximal runs of a-z (bytes, as `Needs` holds them)."""
    return set(text.encode("utf-8", "surrogatepass").translate(_NOT_LETTERS).split())
