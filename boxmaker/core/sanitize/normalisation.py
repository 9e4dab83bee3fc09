"""The text the flag patterns read: folded so that disguises do not hide an attack. Pure; no I/O.

Written by hand, with no library beyond `unicodedata` (003 section 6.3). Each
character is folded on its own (rules 1 to 5), then runs (rule 6):

1. Full-width ASCII (U+FF01 to U+FF5E) becomes the ASCII it imitates (and is
   folded as that ASCII is).
2. Leetspeak digits and signs become letters: 0 o, 1 i, 3 e, 4 a, 5 s, 7 t,
   @ a, $ s. A `1` may stand for an `l` too: the patterns let `i` match where
   they spell `l` (see flag_patterns).
3. About forty Cyrillic and Greek letters that look Latin become that Latin
   letter (`LOOKALIKES`, from Unicode's confusables.txt, small and capital, with
   the Kelvin sign and the dotted capital I).
4. Lower case, for ASCII letters (and rules 1 and 3 give lower case). Other
   letters are left as they are: no pattern reads them, and so every character
   folds to at most one.
5. Zero-width characters (every default-ignorable and format character) are
   dropped, so `ig<ZWSP>nore` reads `ignore`.
6. Every whitespace character (str.isspace: line breaks, U+2028, U+2029, no-break
   and ideographic spaces) and the Braille blank become a space, and a run of
   spaces becomes one: the text is one line, so patterns can span line breaks.

Each character folds to at most one, so a position in the normalised text maps
back to one character of the original: `Normalised.origin`. The text is cut into
chunks of about `CHUNK` characters, each cut at a character that is neither
whitespace nor zero-width, where rules 5 and 6 cannot reach across the cut; each
chunk is folded on its own, in C (ASCII by a byte table, the other characters
that fold and are there each by `str.replace`, or by a class when many), and
the flag rules' fast path folds a whole text in one go (`fold`). Mapping a
position back walks one chunk only, in Python, and only for a match.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from boxmaker.core.sanitize.characters import character_classes, to_ranges

CHUNK = 1024

LEET = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}

# confusables.txt: Cyrillic and Greek letters whose glyph is a Latin letter's
LOOKALIKES = {
    # Cyrillic, small
    "\u0430": "a", "\u0432": "b", "\u0441": "c", "\u0435": "e", "\u043d": "h",
    "\u0456": "i", "\u0458": "j", "\u043a": "k", "\u043c": "m", "\u043e": "o",
    "\u0440": "p", "\u0455": "s", "\u0442": "t", "\u0443": "y", "\u0445": "x",
    "\u04bb": "h", "\u0501": "d", "\u051b": "q", "\u051d": "w", "\u04cf": "l",
    # Cyrillic, capital
    "\u0410": "a", "\u0412": "b", "\u0421": "c", "\u0415": "e", "\u041d": "h",
    "\u0406": "i", "\u0408": "j", "\u041a": "k", "\u041c": "m", "\u041e": "o",
    "\u0420": "p", "\u0405": "s", "\u0422": "t", "\u0423": "y", "\u0425": "x",
    # Greek, small
    "\u03b1": "a", "\u03b5": "e", "\u03b9": "i", "\u03ba": "k", "\u03bd": "v",
    "\u03bf": "o", "\u03c1": "p", "\u03c4": "t", "\u03c5": "u", "\u03c7": "x",
    # Greek, capital
    "\u0391": "a", "\u0392": "b", "\u0395": "e", "\u0396": "z", "\u0397": "h",
    "\u0399": "i", "\u039a": "k", "\u039c": "m", "\u039d": "n", "\u039f": "o",
    "\u03a1": "p", "\u03a4": "t", "\u03a5": "y", "\u03a7": "x",
    # the dotted capital I and the Kelvin sign
    "\u0130": "i", "\u212a": "k",
}  # fmt: skip

BLANK = "\N{BRAILLE PATTERN BLANK}"
_SPACES = re.compile("  +")  # " {2,}", but led by a literal that `re` skips ahead to
_SPACES_BYTES = re.compile(b"  +")  # the same in UTF-8, where no other character has a 0x20
_ASCII = bytes(range(0x80))
REPLACED = 8  # the most distinct characters folded by `str.replace`, one pass each


@dataclass(frozen=True, slots=True)
class Folding:
    table: dict[int, str | None]  # rules 1 to 5 and 6's first half, for str.translate
    ascii_bytes: bytes  # the table's ASCII part, for bytes.translate
    other: re.Pattern[str]  # a run of non-ASCII characters the table folds
    cut: re.Pattern[str]  # a character where a chunk may start


def _class_text(codes: Iterable[int]) -> str:
    return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in to_ranges(sorted(codes)))


@cache
def folding() -> Folding:
    classes = character_classes()
    table: dict[int, str | None] = dict.fromkeys(classes.zero_width)
    table.update(dict.fromkeys(classes.whitespace, " "))
    table[ord(BLANK)] = " "
    for code in range(0xFF01, 0xFF5F):  # full width, then as its ASCII folds
        ascii_char = chr(code - 0xFEE0)
        table[code] = LEET.get(ascii_char, ascii_char).lower()
    table.update({code: chr(code).lower() for code in range(ord("A"), ord("Z") + 1)})
    table.update({ord(char): folded for char, folded in (LEET | LOOKALIKES).items()})
    ascii_bytes = bytes(
        ord(table.get(code) or chr(code)) if code < 0x80 else code for code in range(256)
    )
    assert all(table.get(code, "x") for code in range(0x80)), "an ASCII character is dropped"
    passing = [code for code, folded in table.items() if folded in (None, " ")]
    return Folding(
        table=table,
        ascii_bytes=ascii_bytes,
        other=re.compile(f"[{_class_text(code for code in table if code >= 0x80)}]+"),
        cut=re.compile(f"[^{_class_text(passing)}]"),
    )


def _fold_other(match: re.Match[str]) -> str:
    return match.group().translate(folding().table)


def fold(text: str) -> str:
    """Rules 1 to 6 over `text` (a chunk: no run of rules 5 and 6 is cut at its ends).

    The same as `_SPACES.sub(" ", text.translate(folding().table))`, faster: ASCII by
    a byte table, and its runs of spaces made one there; of the rest, only the
    characters the table folds that are there (found from the text's non-ASCII bytes
    alone), each by one `str.replace` while they are few, else every run of them by a
    regex, and the runs of spaces made one again only if one of them is a space or
    dropped."""
    rules = folding()
    encoded = text.encode("utf-8", "surrogatepass")
    spaced = _SPACES_BYTES.sub(b" ", encoded.translate(rules.ascii_bytes))
    out = spaced.decode("utf-8", "surrogatepass")
    if text.isascii():
        return out
    others = encoded.translate(None, _ASCII).decode("utf-8", "surrogatepass")
    present = set("".join(rules.other.findall(others)))  # those the table folds
    if len(present) > REPLACED:
        out = rules.other.sub(_fold_other, out)
    else:
        for char in present:
            out = out.replace(char, rules.table[ord(char)] or "")
    # the runs of spaces are one space already, unless a space or a dropped character came in
    spacing = any(rules.table[ord(char)] in (None, " ") for char in present)
    return _SPACES.sub(" ", out) if spacing else out


def _fold_char(char: str) -> str:
    return char.translate(folding().table)


@dataclass(slots=True)
class Normalised:
    """A text's normalised form, and the way back to the original's positions."""

    original: str
    text: str
    starts: list[int]  # each chunk's start in `original`
    norm_starts: list[int]  # each chunk's start in `text`
    _origins: dict[int, list[int]] = field(default_factory=dict)

    def _chunk_origins(self, chunk: int) -> list[int]:
        """For each character of chunk `chunk`'s normalised text, its index in the original."""
        if chunk not in self._origins:
            begin = self.starts[chunk]
            end = self.starts[chunk + 1] if chunk + 1 < len(self.starts) else len(self.original)
            origins: list[int] = []
            last_space = False
            for index in range(begin, end):
                folded = _fold_char(self.original[index])
                if not folded or (folded == " " and last_space):
                    continue
                last_space = folded == " "
                origins.append(index)
            self._origins[chunk] = origins
        return self._origins[chunk]

    def origin(self, position: int) -> int:
        """The index in the original of the character at `position` in `text`."""
        # the last chunk starting at or before it: only the first chunk can be empty
        # (every other starts with a character that folds to one that is not a space),
        # and this skips it
        chunk = bisect_right(self.norm_starts, position) - 1
        return self._chunk_origins(chunk)[position - self.norm_starts[chunk]]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the normalised span `start`..`end` (end exclusive, non-empty)."""
        return self.origin(start), self.origin(end - 1) + 1


def normalise(text: str, chunk: int = CHUNK) -> Normalised:
    """`text` under rules 1 to 6, in chunks of about `chunk` characters."""
    cut = folding().cut
    starts: list[int] = []
    norm_starts: list[int] = []
    pieces: list[str] = []
    size = 0
    begin = 0
    while begin < len(text):
        found = cut.search(text, min(begin + chunk, len(text)))
        end = found.start() if found else len(text)
        piece = fold(text[begin:end])
        starts.append(begin)
        norm_starts.append(size)
        pieces.append(piece)
        size += len(piece)
        begin = end
    return Normalised(text, "".join(pieces), starts, norm_starts)
