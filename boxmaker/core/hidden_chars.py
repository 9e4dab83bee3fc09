"""Which characters a terminal must never be handed raw: the one rule. No I/O.

A character is hidden when a terminal would act on it, show nothing for it, or show
something other than what it is. That is:

- its general category (Python's `unicodedata`, Unicode 14.0 on Python 3.11) is
  control `Cc`, format `Cf`, line separator `Zl`, paragraph separator `Zp`,
  surrogate `Cs`, private use `Co` (a font may draw anything there) or unassigned
  `Cn` (noncharacters included; a later Unicode may make it invisible); or
- it is a `Default_Ignorable_Code_Point`: the ranges below, copied from Unicode's
  DerivedCoreProperties.txt (unchanged from Unicode 14.0 to 16.0), which add
  fillers and variation selectors that are letters or marks by category
  (U+115F, U+3164, U+FE0F, ...).

Spaces (`Zs`) and visible combining marks are not hidden.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})

# Default_Ignorable_Code_Point, as inclusive (first, last) ranges in code point order
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors and vowel separator
    (0x200B, 0x200F),  # zero width space, joiners, direction marks
    (0x202A, 0x202E),  # direction embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # reserved before the specials
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol formats
    (0xE0000, 0xE0FFF),  # tags, variation selectors 17-256, reserved
)

_FIRSTS = tuple(first for first, _ in DEFAULT_IGNORABLE)


def is_default_ignorable(code: int) -> bool:
    """True when code point `code` is a Default_Ignorable_Code_Point."""
    index = bisect_right(_FIRSTS, code) - 1
    return index >= 0 and code <= DEFAULT_IGNORABLE[index][1]


def is_hidden(char: str) -> bool:
    """True when the one character `char` must be escaped before a terminal sees it."""
    if " " <= char <= "~":
        return False  # printable ASCII, the common case
    return unicodedata.category(char) in HIDDEN_CATEGORIES or is_default_ignorable(ord(char))
