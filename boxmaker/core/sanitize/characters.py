"""The refuse rules on single code points: which characters are only ever attacks. Pure; no I/O.

Built from Unicode data, never from hand-typed ranges: general categories from the
running Python's `unicodedata` (Unicode 14.0 on Python 3.11), noncharacters by
arithmetic, Default_Ignorable_Code_Point, Bidi_Control and Emoji_Modifier from the
generated `unicode_tables`, and the emoji sequences from the generated
`emoji_tables` (Unicode's own lists; see each header). The category scan runs
once, on first use (about 0.2 s), not at import.

The rules, in the order a code point is classified (the first that holds names it):

1. `lone-surrogate`: a surrogate code point (category Cs). UTF-8 cannot carry one,
   so it only reaches a `str` through a decoder's error handler.
2. `control-character`: category Cc except line feed and tab (so carriage return,
   escape, DEL and the C1 controls are refused).
3. `noncharacter`: U+FDD0 to U+FDEF and the last two code points of every plane.
4. `private-use`: category Co (U+E000 to U+F8FF, planes 15 and 16).
5. `bidi-control`: Bidi_Control (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066
   to U+2069), the "Trojan Source" reordering of code.
6. `invisible-character`: every other Default_Ignorable_Code_Point (zero-width
   space and joiners, variation selectors, the tag block, Hangul fillers, soft
   hyphen, ...), every other format character (Cf), and three that render blank
   but are neither: U+2028, U+2029 and U+2800 (the Braille blank).

Emoji (the decision, written out in docs/sanitizer.md): an emoji sequence that
Unicode lists is ordinary text, so rule 6's characters inside one pass. Only these:

    selector = VS15 (U+FE0E) or VS16 (U+FE0F) right after a base that
               emoji-variation-sequences.txt lists with it and whose default
               look it changes: VS15 after a base with Emoji_Presentation
               (emoji by default, so VS15 asks for text), VS16 after one
               without (text by default); except 0-9, # and *
    keycap   = 0-9, # or *, then VS16, then U+20E3 (emoji-sequences.txt)
    joiner   = U+200D inside a run that emoji-zwj-sequences.txt lists, whole: the
               run is the joined elements around it (an element is a character,
               then at most one selector or skin tone), and the whole run must be
               one listed sequence
    tags     = a listed tag sequence (emoji-sequences.txt: the flags of England,
               Scotland and Wales) after its base

So a selector after a letter, after an emoji that takes none (U+1F600 VS16), or
after another selector, a selector that repeats its base's default look (U+2764
HEAVY BLACK HEART, text by default, with VS15; U+231A WATCH, emoji by default,
with VS16: the glyph shown is the same with it or without, so it would be a hidden
bit), a lone selector on a digit, any other selector, a joiner in a run that
Unicode does not list, and any other tag character stay refused.
What passes carries no hidden text: each allowed character is one of the few the
character before it can take, and changes the glyph shown.

Each test is local and bounded: a joiner's run is walked at most as far as the
longest listed sequence, and looked up in a set, so a scan stays linear.

Consecutive characters under one rule make one finding, whose excerpt names the
first (`U+202E RIGHT-TO-LEFT OVERRIDE`) and how many follow.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from boxmaker.core.sanitize.emoji_tables import (
    EMOJI_PRESENTATION,
    EMOJI_STYLE_BASES,
    KEYCAP_SEQUENCES,
    TAG_SEQUENCES,
    TEXT_STYLE_BASES,
    ZWJ_SEQUENCES,
)
from boxmaker.core.sanitize.findings import Action, Finding
from boxmaker.core.sanitize.unicode_tables import BIDI_CONTROL, DEFAULT_IGNORABLE, EMOJI_MODIFIER

CONTROL = "control-character"
INVISIBLE = "invisible-character"
BIDI = "bidi-control"
PRIVATE_USE = "private-use"
NONCHARACTER = "noncharacter"
SURROGATE = "lone-surrogate"

# rendered blank but neither default-ignorable nor a format character
BLANK_EXTRAS = ("\N{LINE SEPARATOR}", "\N{PARAGRAPH SEPARATOR}", "\N{BRAILLE PATTERN BLANK}")
PASSING_CONTROLS = "\n\t"

ZWJ = "\N{ZERO WIDTH JOINER}"
VS15 = "\N{VARIATION SELECTOR-15}"
VS16 = "\N{VARIATION SELECTOR-16}"


def _spelled(table: Iterable[tuple[int, ...]]) -> frozenset[str]:
    return frozenset("".join(map(chr, codes)) for codes in table)


# the emoji sequences Unicode lists (the generated emoji_tables), as strings
ZWJ_RUNS = _spelled(ZWJ_SEQUENCES)
LONGEST_ZWJ_RUN = max(map(len, ZWJ_RUNS))
KEYCAPS = _spelled(KEYCAP_SEQUENCES)
KEYCAP_BASES = frozenset(keycap[0] for keycap in KEYCAPS)


def _tag_runs() -> dict[str, tuple[str, ...]]:
    """Base -> the tag characters that may follow it: the listed tag sequences less their base."""
    runs: dict[str, list[str]] = {}
    for sequence in sorted(_spelled(TAG_SEQUENCES)):
        runs.setdefault(sequence[0], []).append(sequence[1:])
    return {base: tuple(tags) for base, tags in runs.items()}


TAG_RUNS = _tag_runs()


def _selector_bases() -> dict[str, frozenset[str]]:
    """Selector -> the bases it may follow: those listed with it whose default look it changes."""

    def listed(table: Iterable[tuple[int, int]]) -> set[str]:
        return {chr(code) for first, last in table for code in range(first, last + 1)}

    emoji_by_default = listed(EMOJI_PRESENTATION)
    return {
        VS15: frozenset(listed(TEXT_STYLE_BASES) & emoji_by_default),
        VS16: frozenset(listed(EMOJI_STYLE_BASES) - emoji_by_default),
    }


SELECTOR_BASES = _selector_bases()


def in_ranges(table: Sequence[tuple[int, int]], code: int) -> bool:
    """True when `code` lies in one of `table`'s sorted inclusive ranges."""
    index = bisect_right(table, (code, 0x10FFFF)) - 1
    return index >= 0 and code <= table[index][1]


def is_noncharacter(code: int) -> bool:
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def to_ranges(points: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as inclusive ranges."""
    out: list[tuple[int, int]] = []
    for point in points:
        if out and out[-1][1] == point - 1:
            out[-1] = (out[-1][0], point)
        else:
            out.append((point, point))
    return out


@dataclass(frozen=True, slots=True)
class CharacterClasses:
    scan: re.Pattern[str]  # a run of characters some rule refuses
    runs: dict[str, re.Pattern[str]]  # rule -> a run of them, less those emoji may hold
    zero_width: frozenset[int]  # default-ignorable or format: normalisation drops these
    whitespace: frozenset[int]  # str.isspace, for normalisation


def _class_text(points: Iterable[int]) -> str:
    def one(code: int) -> str:
        return f"\\U{code:08x}"

    ranges = to_ranges(sorted(points))
    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in ranges)


def _expand(table: Iterable[tuple[int, int]]) -> set[int]:
    return {code for first, last in table for code in range(first, last + 1)}


def _is_mark(char: str) -> bool:
    """A selector or a skin tone: what may close an element of a joined run."""
    return char in (VS15, VS16) or in_ranges(EMOJI_MODIFIER, ord(char))


def _joined_run(text: str, index: int) -> bool:
    """True when the joiner at `index` sits in a run that is one whole listed ZWJ sequence."""
    start = index  # a joiner; step left over the element before it, while a joiner precedes
    while True:
        if start < 1:
            return False
        start -= 1 + (start >= 2 and _is_mark(text[start - 1]))
        if index - start > LONGEST_ZWJ_RUN:
            return False
        if start < 1 or text[start - 1] != ZWJ:
            break
        start -= 1
    end = index  # a joiner; step right over the element after it, while a joiner follows
    while True:
        end += 1
        if end >= len(text):
            return False
        end += 1 + (end + 1 < len(text) and _is_mark(text[end + 1]))
        if end - index > LONGEST_ZWJ_RUN:
            return False
        if end >= len(text) or text[end] != ZWJ:
            break
    return text[start:end] in ZWJ_RUNS


def _selector_passes(text: str, index: int) -> bool:
    """True when the selector at `index` is one Unicode lists for the character before it,
    and changes that character's default look."""
    if index < 1:
        return False
    before = text[index - 1]
    if before in KEYCAP_BASES:  # on 0-9, # and * a lone selector would be a hidden bit
        return text[index - 1 : index + 2] in KEYCAPS
    return before in SELECTOR_BASES[text[index]]


def emoji_part(text: str, index: int) -> int:
    """How many characters from `index` a listed emoji sequence holds there (0: none).

    Called on a character of `EMOJI_PARTS`; each test is local and bounded (a joiner's
    run is walked at most `LONGEST_ZWJ_RUN` characters), so a scan stays linear.
    """
    char = text[index]
    if char == ZWJ:
        return int(_joined_run(text, index))
    if char in (VS15, VS16):
        return int(_selector_passes(text, index))
    for tags in TAG_RUNS.get(text[index - 1] if index > 0 else "", ()):
        if text.startswith(tags, index):
            return len(tags)
    return 0


# the refused characters an emoji sequence may hold: checked one by one, in context
TAGS = (0xE0020, 0xE007F)  # the tag characters, from TAG SPACE to CANCEL TAG
EMOJI_PARTS = frozenset([ZWJ, VS15, VS16, *map(chr, range(TAGS[0], TAGS[1] + 1))])
_TAG_RUN = re.compile(f"[\\U{TAGS[0]:08x}-\\U{TAGS[1]:08x}]+")


@cache
def character_classes() -> CharacterClasses:
    """The classes above, from one scan of every code point's category (done once)."""
    codes = range(0x110000)
    categories = list(map(unicodedata.category, map(chr, codes)))
    wanted = frozenset({"Cc", "Cf", "Co", "Cs", "Zs", "Zl", "Zp"})
    by_category: dict[str, set[int]] = {category: set() for category in wanted}
    for code in itertools.compress(codes, map(wanted.__contains__, categories)):
        by_category[categories[code]].add(code)

    # each rule's characters, less those of the rules before it (the order of classify)
    candidates = {
        SURROGATE: by_category["Cs"],
        CONTROL: by_category["Cc"] - set(map(ord, PASSING_CONTROLS)),
        NONCHARACTER: set(range(0xFDD0, 0xFDF0))
        | {plane + low for plane in range(0, 0x110000, 0x10000) for low in (0xFFFE, 0xFFFF)},
        PRIVATE_USE: by_category["Co"],
        BIDI: _expand(BIDI_CONTROL),
        INVISIBLE: _expand(DEFAULT_IGNORABLE) | by_category["Cf"] | set(map(ord, BLANK_EXTRAS)),
    }
    rules: dict[str, set[int]] = {}
    for rule, points in candidates.items():
        rules[rule] = points.difference(*rules.values())
    refused = set().union(*rules.values())
    spaces = {
        code
        for category in ("Cc", "Zs", "Zl", "Zp")
        for code in by_category[category]
        if chr(code).isspace()
    }
    parts = set(map(ord, EMOJI_PARTS))
    return CharacterClasses(
        scan=re.compile(f"[{_class_text(refused)}]+"),
        runs={
            rule: re.compile(f"[{_class_text(points - parts)}]+") for rule, points in rules.items()
        },
        zero_width=frozenset(by_category["Cf"] | _expand(DEFAULT_IGNORABLE)),
        whitespace=frozenset(spaces),
    )


def classify(char: str) -> str:
    """The rule that refuses `char`, a character some rule refuses (rules 1 to 6)."""
    category = unicodedata.category(char)
    code = ord(char)
    if category == "Cs":
        return SURROGATE
    if category == "Cc":
        return CONTROL
    if is_noncharacter(code):
        return NONCHARACTER
    if category == "Co":
        return PRIVATE_USE
    if in_ranges(BIDI_CONTROL, code):
        return BIDI
    return INVISIBLE


def describe(char: str, count: int) -> str:
    """A run's excerpt: the first character's code point and name, and how many follow."""
    name = unicodedata.name(char, "")
    head = f"U+{ord(char):04X} {name}".rstrip()
    return head if count == 1 else f"{head} and {count - 1} more"


def refused_characters(text: str) -> list[Finding]:
    """One refuse finding per run of characters under one rule, in text order."""
    classes = character_classes()
    runs: list[tuple[str, int, int]] = []  # (rule, start, end) of each run so far

    def add(rule: str, start: int, end: int) -> None:
        if runs and runs[-1][0] == rule and runs[-1][2] == start:
            runs[-1] = (rule, runs[-1][1], end)
        else:
            runs.append((rule, start, end))

    for match in classes.scan.finditer(text):
        index, end = match.span()
        while index < end:
            char = text[index]
            if char in EMOJI_PARTS:
                part = emoji_part(text, index)
                if part:
                    index += part
                    continue
                # a tag character right after another can never start a flag
                tags = _TAG_RUN.match(text, index, end)
                stop = tags.end() if tags else index + 1
                add(INVISIBLE, index, stop)
                index = stop
                continue
            rule = classify(char)
            run = classes.runs[rule].match(text, index, end)
            assert run is not None  # classify and the run classes agree: a test checks
            add(rule, index, run.end())
            index = run.end()
    return [
        Finding(Action.REFUSE, rule, start, describe(text[start], stop - start))
        for rule, start, stop in runs
    ]
