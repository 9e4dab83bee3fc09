"""Printing text the model chose as data, never as terminal control. No I/O.

Every hidden character (`boxmaker.core.display.hidden_chars.is_hidden`: controls, format
characters, line and paragraph separators, surrogates, private use, unassigned and
default-ignorable code points) is shown in JSON's spelling: `\\uhhhh` with four
lowercase hex digits, and a code point above U+FFFF as its UTF-16 surrogate pair,
`\\udb40\\udc41` for the tag letter U+E0041 (JSON has no longer escape). Arguments
are JSON, where that is the standard spelling of the same character and a real
backslash is already `\\\\`, so inside every JSON string the escaped text means
exactly what the arguments mean: `json.loads` of both gives the same value, and a
displayed path cannot differ from the matched one. Two things JSON cannot keep:
tab, newline and carriage return between JSON tokens are escaped too (the
arguments stay on one line; brokerd's canonical arguments have none), and a lone
high surrogate followed by a lone low surrogate reads back as the one character
they pair to (such text cannot come over the wire, which is UTF-8).
"""

from __future__ import annotations

from boxmaker.core.display.hidden_chars import is_hidden

_PROSE_PASSES = frozenset("\n\t")


def _spell(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"


def escape_arguments(text: str) -> str:
    """`text` with every hidden character, newline and tab included, spelled as in JSON."""
    return "".join(_spell(char) if is_hidden(char) else char for char in text)


def escape_model_text(text: str) -> str:
    """Model prose for a terminal: as `escape_arguments`, but newline and tab pass."""
    return "".join(
        _spell(char) if is_hidden(char) and char not in _PROSE_PASSES else char for char in text
    )
