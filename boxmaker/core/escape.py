"""Printing text the model chose as data, never as terminal control. No I/O.

Each of these characters is shown as `\\uhhhh` (four lowercase hex digits): the
C0 and C1 controls and DEL (U+0000-001F, U+007F-009F), the zero-width and
direction marks (U+200B-200F), the line and paragraph separators and direction
embeddings and overrides (U+2028-202E), the word joiner and direction isolates
(U+2060-2069), and the byte order mark (U+FEFF). Arguments are JSON, where
`\\uhhhh` is the standard spelling of the same character and a real backslash is
already `\\\\`, so the escaped text is still exactly the arguments and a
displayed path cannot differ from the matched one.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_UNSAFE_IN_PROSE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def _code(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_arguments(text: str) -> str:
    """`text` with every unsafe character, newline and tab included, as `\\uhhhh`."""
    return _UNSAFE.sub(_code, text)


def escape_model_text(text: str) -> str:
    """Model prose for a terminal: as `escape_arguments`, but newline and tab pass."""
    return _UNSAFE_IN_PROSE.sub(_code, text)
