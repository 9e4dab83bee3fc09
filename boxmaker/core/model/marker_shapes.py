"""Which token texts are shaped like a chat or model marker. Pure; no I/O.

loopd's marker list (`boxmaker.loopd.markers`, docs/markers.md) takes every
control token of a vocabulary, and those user-defined tokens that are named by
the file's special-token keys, used by its chat template, or shaped like a
marker by the rules here. The rules look only at the token's text:

1. Whitespace alone (runs of spaces, tabs, newlines) is never a marker.
2. Angle-bar: the text starts with an angle bracket and a bar, or ends with a
   bar and an angle bracket, the bar ASCII `|` or full-width U+FF5C (Command-R's
   turn tokens, ChatML's, Gemma 4's tool and channel tags, DeepSeek's).
3. An angle-bracketed name, opening or closing (an optional `/`), whose name is
   one of `MARKER_NAMES` (think, tool_call, image, pad, eos, ...), or begins
   with `start_of_`, `end_of_`, `begin_of_`, `fim_`, `im_`, `unused` or
   `reserved`, or ends with `_soft_token`.
4. A bracketed name, opening or closing: `[`, an optional `/`, a letter, one or
   more letters, digits or underscores, `]` (Mistral's instruction markers,
   Gemma's multimodal marker, the `[PAD...]` padding tokens).
5. Falcon's form: two `>`, capitals and underscores, two `<`.

Anything else is plain text, even when a vocabulary gives it a token of its
own: HTML tags such as table, code or strong mean exactly their text, and a
marker list holding them would mangle code and documents. The names below are
written as names, never as whole tags, so that this file is not itself a
prompt-breaking text.
"""

from __future__ import annotations

import re

from boxmaker.core.model.known_markers import marker_names

OPEN, CLOSE, BAR, WIDE_BAR = "<", ">", "|", "\N{FULLWIDTH VERTICAL LINE}"

MARKER_NAMES = (
    frozenset(
        {
            "think",
            "tool",
            "tool_call",
            "tool_calls",
            "tool_code",
            "tool_response",
            "tool_result",
            "tool_output",
            "image",
            "audio",
            "video",
            "pad",
            "unk",
            "mask",
            "bos",
            "eos",
            "eot",
            "sep",
            "cls",
        }
    )
    | marker_names()
)  # the known markers' own (core.model.known_markers)
_NAME_PREFIXES = ("start_of_", "end_of_", "begin_of_", "fim_", "im_", "unused", "reserved")
_NAME_SUFFIXES = ("_soft_token",)

_BARS = f"[{re.escape(BAR)}{WIDE_BAR}]"
_ANGLE_BAR = re.compile(f"{re.escape(OPEN)}{_BARS}.+|.+{_BARS}{re.escape(CLOSE)}", re.DOTALL)
_ANGLE_NAME = re.compile(f"{re.escape(OPEN)}/?([A-Za-z][A-Za-z0-9_]*){re.escape(CLOSE)}")
_BRACKET_NAME = re.compile(r"\[/?[A-Za-z][A-Za-z0-9_]+\]")
_FALCON = re.compile(f"{CLOSE}{CLOSE}[A-Z_]+{OPEN}{OPEN}")


def is_marker_shaped(text: str) -> bool:
    """Whether `text` has a marker's shape (rules 1 to 5 above)."""
    if not text.strip():
        return False
    if _ANGLE_BAR.fullmatch(text) or _BRACKET_NAME.fullmatch(text) or _FALCON.fullmatch(text):
        return True
    named = _ANGLE_NAME.fullmatch(text)
    if named is None:
        return False
    name = named.group(1)
    return name in MARKER_NAMES or name.startswith(_NAME_PREFIXES) or name.endswith(_NAME_SUFFIXES)
